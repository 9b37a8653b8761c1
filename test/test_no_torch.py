"""The nodes that run the arm load no torch, neither at import nor while they work.

torch costs a node about 2 s of start-up and 200 MB of resident memory (bench/RESULTS.md,
"Node start-up"), and the live numbers come from the compiled loop on numpy arrays
(:mod:`plag_ros.core.dynamics.arrays`). A fresh interpreter imports the driver, dynamics,
impedance and sim nodes, builds the latter three in-process over a real rclpy context,
ticks the simulator, feeds the others joint states through their own callbacks (the
controller enabled with a target inertia, so its law, mass matrix and gravity all run,
then a stale input's hold), builds the driver's gravity function and calls it; torch
must still be missing from ``sys.modules``. The same interpreter then imports the torch
engine, which must load torch: the probe can see it.
"""
from __future__ import annotations

import json
import subprocess
import sys

from ros_helpers import REPO, ros_env

DOMAIN_ID = 31

_PROBE = r"""
import json, sys, time
import numpy as np
import rclpy
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState

from plag_ros.bus.host.driver import gravity_in_chain_order
from plag_ros.ros.nodes import driver_node
from plag_ros.ros.nodes.dynamics_node import DynamicsNode
from plag_ros.ros.nodes.impedance_node import ImpedanceNode
from plag_ros.ros.nodes.sim_node import SimNode

found = {'imported': 'torch' in sys.modules}
rclpy.init()
file = Parameter('robot_description_source', value='file')
impedance = ImpedanceNode(parameter_overrides=[
    file, Parameter('use_header_stamp', value=False), Parameter('inertia', value=[0.05]),
    Parameter('command_interface', value='effort'), Parameter('gain_check', value='off')])
dynamics = DynamicsNode(parameter_overrides=[file])
sim = SimNode()
for _ in range(20):
    time.sleep(0.005)
    sim._on_tick()
found['sim_steps'] = sim.sim.steps
model = impedance.model
q = np.clip(np.full(model.n_joints, 0.3), model.joint_lower, model.joint_upper)
states = []
for k in range(60):
    msg = JointState(name=list(model.joint_names), position=list(q),
                     velocity=[0.0] * model.n_joints, effort=[0.0] * model.n_joints)
    t_ns = 1_000_000_000 + k * 5_000_000
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t_ns, 1_000_000_000)
    impedance.on_joint_state(msg)
    dynamics.on_joint_state(msg)
    time.sleep(0.005)   # 200 Hz on the node's clock
    if k == 10:      # what ~/enable does once the arm is the node's: the law runs from here
        found['enable'] = impedance.controller.set_enabled(True, impedance._now_ns())
    states.append(impedance.controller.state)
found['states'] = sorted(set(states))
found['published'] = dynamics._stats.window.stamps
hold = impedance.controller.tick(impedance._now_ns() + 1_000_000_000)
found['hold'] = None if hold is None else [hold.state, hold.reason]
chain = [j for j in model.actuated_names][:7]
found['gravity'] = float(np.abs(gravity_in_chain_order(model, chain)(q[:7])).max())
found['after_work'] = 'torch' in sys.modules
impedance.destroy_node()
dynamics.destroy_node()
sim.destroy_node()
rclpy.shutdown()
import plag_ros.core.dynamics.engine
found['after_engine'] = 'torch' in sys.modules
print(json.dumps(found))
"""


def test_the_nodes_work_without_loading_torch():
    done = subprocess.run([sys.executable, '-c', _PROBE], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env=ros_env(DOMAIN_ID))
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found['imported'] is False, 'importing a node loaded torch'
    assert found['enable'][0] is True, found
    assert 'ramping' in found['states'], found          # the law ran, not only warm-up
    assert found['published'] == 60, found
    assert found['hold'] == ['fault', 'stale'], found
    assert found['gravity'] > 0.1, found
    assert found['sim_steps'] >= 20, found
    assert found['after_work'] is False, 'a node loaded torch while it worked'
    assert found['after_engine'] is True, 'the probe cannot see torch'


_LOOP_PROBE = r"""
import json, sys
from plag_ros.bus.chain_file import CRANE_X7_BUS, BusConfig
from plag_ros.bus.host import loop_process
from plag_ros.bus.host.driver import DriverSettings
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
import numpy as np

recipe = loop_process.DriverRecipe(BusConfig.load(CRANE_X7_BUS), DriverSettings(),
                                   RobotModel.from_urdf(default_urdf_path()))
driver = recipe.build()
g = driver.gravity_torque(np.array([0.0, 0.6, 0.0, -1.2, 0.0, 0.5, 0.0, 0.0]))
print(json.dumps({'torch': 'torch' in sys.modules, 'tilt': float(g[1])}))
"""


def test_the_bus_loop_process_works_without_loading_torch():
    """The driver's bus loop runs in a process of its own (python -m
    plag_ros.bus.host.loop_process): what it imports and builds (its driver, with the
    model's gravity torque) loads no torch either."""
    done = subprocess.run([sys.executable, '-c', _LOOP_PROBE], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env=ros_env(DOMAIN_ID))
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found['torch'] is False, 'the bus loop process loaded torch'
    assert abs(found['tilt']) > 0.1, found        # the gravity torque was computed
