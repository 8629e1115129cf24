"""The local rig: nginx (configured like the Ingress) in front of two gateway processes that
share one redis-server, a fake OpenAI upstream, and Prometheus scraping both gateways; driven
by a checking load client through steady load, per-key limits and a rolling restart.

    make rig                    # python -m deploy.rig: the full run, ~1.5 minutes
    python -m deploy.rig --small

What it shows and why it is built this way: deploy/README.md, "Local rig".
"""
