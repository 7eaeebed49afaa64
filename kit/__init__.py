"""agent-ab-kit: honest token-cost A/B experiments on LLM agents (docs/design.md; the method: docs/method.md)."""

__version__ = "0.1.0"
