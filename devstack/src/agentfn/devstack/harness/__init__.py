"""What starts the parts for the tests, the benchmarks and the studies, one copy each: a free loopback port
(`ports`), a function under gunicorn or a WSGI app in this process (`servers`), embedded Postgres with the parts'
roles (`postgres`), the service accounts and the deployment's pseudonym key (`identity`), a throwaway CA (`ca`),
a real kube-apiserver (`apiserver`), the page fetcher's network-namespace lab (`page_lab`) and the local platform
that `agentfn up` runs (`local_platform`). Never in an image: the dev stack's distribution is installed by `./dev`.
"""
