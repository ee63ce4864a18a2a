"""Code that two or more agentfn parts need: identity, the HTTP skeleton, problems, storage plumbing."""
