"""The worked identification example of docs/tutorials/identify.md on the simulator, with
its figure and timings.

A "true" CRANE-X7 whose figures differ from the bundled URDF (the acceptance test's arm:
four links' masses -20 % to +30 % and COMs moved by up to 9 mm, viscous friction added,
Coulomb friction doubled, 0.004 kg m^2 armature per arm joint, every servo's K_s 20 % off
the motor table) is written as an identified.yaml, then only ``plag-ros`` commands run::

    plag-ros excite -o OUT/excitation0 --seed 0
    plag-ros excite -o OUT/excitation1 --seed 1
    plag-ros excite --play OUT/excitation0/excitation.yaml --simulate OUT/fit \\
        --cycles 3 --model OUT/true_arm.yaml
    plag-ros excite --play OUT/excitation1/excitation.yaml --simulate OUT/held_out \\
        --cycles 1 --model OUT/true_arm.yaml
    plag-ros identify OUT/fit --holdout OUT/held_out --servo -o OUT/identified

With ``--effort-scale`` the true arm's driver also misreads effort (5-10 % per joint,
``identified_files.EFFORT_SCALES``); the first excitation is played once more carrying a
known 0.5 kg payload on the gripper and ``identify`` gets ``--effort-scale OUT/payload``
with the payload's figures; the scales are printed against the truth.

Usage: ``PYTHONPATH=$PWD python bench/identification_example.py [OUT] [--figure PNG]
[--effort-scale]`` (default OUT: a temporary folder). Prints each command's wall time, the
held-out errors and K_s against the truth; ``--figure`` copies ``held_out.png`` (the
README's figure).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'test'))

from identified_files import (  # noqa: E402
    KNOWN_PAYLOAD,
    acceptance_arm,
    miscalibrated_arm,
    with_known_payload,
)

from plag_ros.apps.cli import main as plag_ros  # noqa: E402
from plag_ros.core.dynamics import motors  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('out', type=Path, nargs='?')
    parser.add_argument('--figure', type=Path)
    parser.add_argument('--effort-scale', action='store_true')
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix='plag_identify_'))
    out.mkdir(parents=True, exist_ok=True)
    scales: dict[str, float] = {}
    if args.effort_scale:
        truth, stiffness, scales = miscalibrated_arm(out)
    else:
        truth, stiffness = acceptance_arm(out)
    commands = [
        ['excite', '-o', f'{out}/excitation0', '--seed', '0'],
        ['excite', '-o', f'{out}/excitation1', '--seed', '1'],
        ['excite', '--play', f'{out}/excitation0/excitation.yaml', '--simulate', f'{out}/fit',
         '--cycles', '3', '--model', truth],
        ['excite', '--play', f'{out}/excitation1/excitation.yaml', '--simulate',
         f'{out}/held_out', '--cycles', '1', '--model', truth],
        ['identify', f'{out}/fit', '--holdout', f'{out}/held_out', '--servo', '-o',
         f'{out}/identified']]
    if args.effort_scale:
        link, mass, com, inertia = KNOWN_PAYLOAD
        carrying = with_known_payload(truth, out / 'with_payload.yaml')
        commands.insert(-1, ['excite', '--play', f'{out}/excitation0/excitation.yaml',
                             '--simulate', f'{out}/payload', '--cycles', '1', '--model',
                             carrying])
        commands[-1] += ['--effort-scale', f'{out}/payload', '--payload-link', link,
                         '--payload-mass', str(mass),
                         '--payload-com', *map(str, com), '--payload-inertia',
                         *[str(inertia)] * 3]
    for command in commands:
        start = time.perf_counter()
        status = plag_ros(command)
        print(f'[{time.perf_counter() - start:6.1f} s] plag-ros {" ".join(command)}')
        if status:
            return status
    report = yaml.safe_load((out / 'identified' / 'identified.yaml').read_text())
    before = np.array(report['held_out_rms']['nominal'])
    after = np.array(report['held_out_rms']['identified'])
    total = (np.sqrt(np.mean(before ** 2)), np.sqrt(np.mean(after ** 2)))
    print(f'held-out torque RMS, all joints: {total[0]:.4f} -> {total[1]:.4f} N*m '
          f'({1 - total[1] / total[0]:.1%} less)')
    found = {j['joint']: j['stiffness'] for j in report['servo']['joints']}
    for joint, true in stiffness.items():
        print(f'  {joint:48s} K_s {found[joint]:7.3f}  true {true:7.3f}  '
              f'({found[joint] / true - 1:+.2%})  table {motors.servo_stiffness([joint])[0]:.3f}')
    found_scale = {j['joint']: j for j in report.get('effort_scale', {}).get('joints', [])}
    for joint, true in scales.items():
        got = found_scale[joint]
        print(f'  {joint:48s} effort scale {got["scale"]:.4f} +- {got["scale_std"]:.4f}  '
              f'true {true:.2f}  ({got["scale"] / true - 1:+.2%})')
    if args.figure:
        shutil.copy(out / 'identified' / 'held_out.png', args.figure)
        print(f'figure: {args.figure}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
