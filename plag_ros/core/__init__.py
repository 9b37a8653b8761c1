"""The ROS-free core: model, engine, estimation, control law, simulation, analysis."""
