"""A ROS domain of one's own: where ``plag-ros sim`` puts its graph, and how it finds one.

A simulated arm must never join a real robot's graph by accident: by default the
bring-up picks a free domain in :data:`PRIVATE_DOMAINS` (probed by a discovery node), with
discovery kept on this machine; an explicit domain joins that graph on purpose.
"""
from __future__ import annotations

import os
import sys
import time

__all__ = ['PRIVATE_DOMAINS', 'domain_in_use', 'isolate']


PRIVATE_DOMAINS = range(101, 200)
"""Where ``plag-ros sim`` looks for a free domain (valid Fast DDS / Cyclone ids, away from
the 0 of a default robot graph and the small ids people pick by hand)."""


def domain_in_use(domain: int, wait_s: float = 1.0) -> bool:
    """Whether any ROS 2 node answers discovery in ``domain`` on this machine within
    ``wait_s`` (a probe node in its own context; it sees itself only when free)."""
    import rclpy
    from rclpy.context import Context

    context = Context()
    rclpy.init(context=context, domain_id=domain)
    try:
        node = rclpy.create_node('plag_domain_probe', context=context,
                                 start_parameter_services=False)
        deadline = time.monotonic() + wait_s
        others: list[str] = []
        while time.monotonic() < deadline and not others:
            others = [n for n in node.get_node_names() if n != 'plag_domain_probe']
            time.sleep(0.05)
        node.destroy_node()
        return bool(others)
    finally:
        context.try_shutdown()


def isolate(domain: int | None, *, out=sys.stdout) -> int:
    """Put this process and its children in a ROS domain and say which.

    ``domain`` None: a free private domain (:data:`PRIVATE_DOMAINS`, starting at a
    pid-derived id so parallel demos spread out, probed with :func:`domain_in_use`), with
    discovery restricted to this machine (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` for
    Iron and later, ``ROS_LOCALHOST_ONLY=1`` for Humble): a simulated arm never joins a
    robot's graph by accident. An explicit ``domain`` joins it on purpose, with the
    environment's discovery settings.

    Returns:
        The domain id now in ``os.environ['ROS_DOMAIN_ID']``.
    """
    if domain is not None:
        if not 0 <= domain <= 232:
            raise ValueError(f'--domain must be in 0..232, got {domain}')
        os.environ['ROS_DOMAIN_ID'] = str(domain)
        print(f'plag-ros: joining ROS_DOMAIN_ID={domain} on purpose (--domain); other '
              'nodes in that domain see the simulated arm', file=out, flush=True)
        return domain
    from plag_ros.ros.rclpy_compat import confine_to_localhost

    localhost = confine_to_localhost(os.environ)
    ids = list(PRIVATE_DOMAINS)
    first = os.getpid() % len(ids)
    for candidate in ids[first:] + ids[:first]:
        if not domain_in_use(candidate):
            break
    else:
        raise RuntimeError(f'no free ROS domain in {PRIVATE_DOMAINS}')
    os.environ['ROS_DOMAIN_ID'] = str(candidate)
    join = ' '.join(f'{k}={v}' for k, v in localhost.items())
    print(f'plag-ros: private ROS_DOMAIN_ID={candidate}, this machine only (join it with '
          f'`export ROS_DOMAIN_ID={candidate} {join}`, or pick one with --domain N)',
          file=out, flush=True)
    return candidate
