"""ament_python package definition for plag_ros (also installs with plain pip)."""
from glob import glob

from setuptools import find_packages, setup

package_name = 'plag_ros'

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
    install_requires=['setuptools'],
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
