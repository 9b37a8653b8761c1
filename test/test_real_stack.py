"""The tests that need a ROS 2 install skip where it is absent, and fail when told it is not.

CI has no launch_ros, controller manager or robot_state_publisher (no package registry
carries them): there every test of test_launch_live.py (marked ``launch``) and of the
``ros2_control`` modules must skip, saying what is missing and how to run them, and must
fail instead under ``PLAG_REQUIRE_LAUNCH=1`` / ``PLAG_REQUIRE_ROS2_CONTROL=1``, so that a
run meant to exercise the real stack cannot pass without it. Each case runs pytest in a
child process on this machine as it is (where a ROS 2 install provides the stack, these
cases have nothing to show and skip).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from real_stack import LAUNCH_ENABLE, ROS2_CONTROL_ENABLE
from ros2_control_rig import missing_tools
from ros_helpers import REPO

CASES = {  # module -> (variable that turns its skip into a failure, command in the reason)
    'test_launch_live.py': ('PLAG_REQUIRE_LAUNCH', LAUNCH_ENABLE),
    'test_ros2_control_live.py': ('PLAG_REQUIRE_ROS2_CONTROL', ROS2_CONTROL_ENABLE),
    'test_switch_parity.py': ('PLAG_REQUIRE_ROS2_CONTROL', ROS2_CONTROL_ENABLE),
    'test_launch_view.py': ('PLAG_REQUIRE_ROS2_CONTROL', ROS2_CONTROL_ENABLE),
    'test_real_arm_steps.py': ('PLAG_REQUIRE_ROS2_CONTROL', ROS2_CONTROL_ENABLE),
}


def _launch_missing() -> bool:
    try:
        import launch  # noqa: F401, I001 - the ROS package, not launch/
        import launch_ros  # noqa: F401
    except ImportError:
        return True
    return False


def _pytest(module: str, env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ('PLAG_REQUIRE_LAUNCH', 'PLAG_REQUIRE_ROS2_CONTROL')}
    env.update(env_extra)
    return subprocess.run([sys.executable, '-m', 'pytest', '-q', '-rs', '-p', 'no:cacheprovider',
                           str(REPO / 'test' / module)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


@pytest.mark.parametrize('module', sorted(CASES))
def test_without_the_real_stack_it_skips_or_fails_as_told(module):
    variable, enable = CASES[module]
    missing = _launch_missing() if variable == 'PLAG_REQUIRE_LAUNCH' else bool(missing_tools())
    if not missing:
        pytest.skip('the real stack is installed here: the module runs for real')
    skipped = _pytest(module, {})
    # (a module skipped whole collects no test: pytest's exit 5)
    assert skipped.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, skipped.stdout[-3000:]
    assert ' skipped' in skipped.stdout and ' passed' not in skipped.stdout, skipped.stdout
    assert ' '.join(enable.split()) in ' '.join(skipped.stdout.split()), skipped.stdout[-3000:]
    failed = _pytest(module, {variable: '1'})
    assert failed.returncode not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), \
        failed.stdout[-3000:]
    assert f'{variable}=1 but' in failed.stdout, failed.stdout[-3000:]
