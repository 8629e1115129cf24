"""Loopback fakes of the cloud endpoints the identity fetchers call (AWS STS, container
credentials and IMDSv2; the GCE metadata server; a Microsoft Entra ID token endpoint over
TLS), each speaking the real wire protocol and reached through the libraries' own endpoint
settings, plus the per-test environment isolation those libraries need."""
