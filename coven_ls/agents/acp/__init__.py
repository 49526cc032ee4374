"""Agents that speak the Agent Client Protocol, configured by name in
`initializationOptions.agents` (backend.py has the design)."""

from .backend import AcpAgent, AcpBackend

__all__ = ["AcpAgent", "AcpBackend"]
