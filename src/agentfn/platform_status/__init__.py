"""agentfn platform_status function."""
