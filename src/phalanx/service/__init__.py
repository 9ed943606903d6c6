"""The extender service: the cluster model, the gang planner and the bind barrier."""
