"""Connector kinds: each kind of upstream behind one interface (``base.py``), resolved by
name (``registry.py``). See docs/architecture.md, "Connector kinds"."""
