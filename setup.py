"""ament_python package definition for plag_ros (also installs with plain pip)."""
from glob import glob
from pathlib import Path

from setuptools import find_packages, setup

package_name = 'plag_ros'
HERE = Path(__file__).resolve().parent


def requirements(path: str) -> list[str]:
    """The requirement lines of a pip requirements file (no comments, no options)."""
    lines = (line.split('#', 1)[0].strip() for line in (HERE / path).read_text().splitlines())
    return [line for line in lines if line and not line.startswith('-')]


# What the code imports, written once: the libraries in requirements/libraries.txt (with
# why each is there), torch at the version the suites run; the ROS packages come from
# package.xml through rosdep (or the ros-* wheels of requirements/ros-*.txt). Each optional
# feature's library is an extra (test/test_dependencies.py holds every import to these).
INSTALL_REQUIRES = ['torch>=2.13', *requirements('requirements/libraries.txt')]
EXTRAS_REQUIRE = {
    # plag_driver and `plag-ros run --driver` on real servos (a ROS install: rosdep's
    # dynamixel_sdk, package.xml)
    'driver': ['dynamixel-sdk>=4.0.3'],
    # plag_ros.api's Result.to_pandas
    'pandas': ['pandas>=1.3.5'],
    # the identification's least-squares peer (Pinocchio's regressor; rosdep: pinocchio)
    'peer': ['pin>=3.4'],
    # the branched-pendulum study's reference simulator
    'studies': ['mujoco>=3.3'],
}

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'test.*', 'bench']),
    package_data={package_name: ['py.typed', 'bus/*.yaml', 'bus/tables/*.yaml']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch', glob('launch/*.launch.py')),
        ('share/' + package_name + '/config', glob('config/*.yaml') + glob('config/*.rviz')
         + glob('config/*.json') + glob('config/*.xml')),
        ('share/' + package_name + '/config/columns', glob('config/columns/*.yaml')),
        ('share/' + package_name + '/urdf', glob('urdf/*.urdf')),
    ],
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    zip_safe=False,
    maintainer='plag_ros developers',
    maintainer_email='plag-ros@example.org',
    description='Partial Lagrangian inverse dynamics, motion propagation torques and '
                'partial-impedance control for the CRANE-X7 under ROS 2.',
    license='Apache-2.0',
    python_requires='>=3.10',
    entry_points={
        'console_scripts': [
            'plag-ros = plag_ros.apps.cli:main',
            # plag_ros.ros.nodes.X:main behind a SIGINT handler set before the long imports
            'dynamics_node = plag_ros.ros.nodes:dynamics_main',
            'sim_node = plag_ros.ros.nodes:sim_main',
            'impedance_node = plag_ros.ros.nodes:impedance_main',
            'driver_node = plag_ros.ros.nodes:driver_main',
        ],
    },
)
