"""Inbound APIs other than Chat Completions, translated to and from the canonical chat
format (sans-IO: requests and chunks in, requests and bytes out)."""
