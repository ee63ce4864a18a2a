"""agentfn radar_latest function."""
