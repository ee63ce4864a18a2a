"""The dev stack's stand-ins for what is outside the project, never shipped in an image (a distribution of its own).

`issuer` (with `sign_in` and `sign_in_page`) plays the cluster's OIDC issuer; `upstream` is the common part of
the test doubles of the platform services behind the read tools (`platform_status`, `list_models`,
`radar_latest`), each speaking the contract in `functions/<tool>/upstream.md`.
"""
