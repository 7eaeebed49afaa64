"""agent-ab-kit: honest token-cost A/B experiments on LLM agents (see DESIGN.md)."""

__version__ = "0.1.0"
