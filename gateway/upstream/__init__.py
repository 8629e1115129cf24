"""The one way out to the upstream: the HTTP client and its pool, the shared alarm clock
behind every upstream deadline, access tokens for the credential mechanisms adapters
declare (`TokenSource`), and the attempt runner every upstream call goes through (key
health, deadlines, redaction, failover).

It may import the sans-IO layers (providers/, framing/, wire/) and routing/; it must not
import server/ or stream/ (the actor uses it, not the other way round).
"""
