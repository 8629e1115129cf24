"""The local rig (deploy/rig/), bounded."""
