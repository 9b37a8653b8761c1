"""The papers' experiments as runnable studies: ``plag-ros study NAME OUT`` or the scripts in
``examples/``. Each study writes its figures and a ``summary.json`` of the numbers its
test checks. :data:`STUDIES` maps each name to its module under this package.

The papers (the keys in the descriptions of :data:`STUDIES`):

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.

[PTT] T. Kusaka, T. Tanaka, "Partial Torque Tensor and Its Building Block Representation
for Dynamics of Branching Structures Using Computational Graph", Robotics 2025, 14(3), 31,
doi:10.3390/robotics14030031.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

STUDIES: dict[str, tuple[str, str]] = {
    'three-link': ('three_link', "Gunji et al. 2025 [MPF]: three-link arm, Figs. 5-14, "
                                 "eq. 1's 1/2"),
    'pendulums': ('pendulums', 'Kusaka and Tanaka 2022 [PL] sec. 3: 1-3 link PD, slider '
                               'reconstruction, 10 DoF'),
    'branching': ('branching', 'Kusaka and Tanaka 2025 [PTT]: double pendulum vs MuJoCo, '
                               'branched pendulum, per-branch tables'),
}
"""study name -> (module in plag_ros.core.studies, one-line description)"""
