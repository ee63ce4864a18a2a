"""The agentfn command line and the local platform it starts."""
