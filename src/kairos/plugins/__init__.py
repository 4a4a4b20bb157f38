"""The capabilities that plug into an agent through :class:`kairos.agent.Plugin`.

Shipped: injection defences (``guard``), the status bar, TODO tools and skills (``annotate``),
sub-agents, and compression (``compress``). ``kairos.app.default_plugins`` picks them from config.
"""
