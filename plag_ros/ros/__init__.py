"""The ROS 2 adapter: messages, topics, parameters and the nodes over the core."""
