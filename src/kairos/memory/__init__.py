"""User memory: what kairos remembers about a user across sessions, on the knowledge base's storage layer."""
