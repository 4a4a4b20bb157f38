"""What the model sees and what a session keeps.

Requests are built by :mod:`~kairos.context.builder` (a byte-stable prefix, the append-only
trajectory, a trailing status) and checked by :mod:`~kairos.context.audit`. Sessions
(:mod:`~kairos.context.session`) persist in SQLite (:mod:`~kairos.context.store`), take in events
through their inbox (:mod:`~kairos.context.inbox`) and have one writer at a time
(:mod:`~kairos.context.lease`). :mod:`~kairos.context.compression` keeps long sessions inside
the window; :mod:`~kairos.context.errors` writes tool error reports the model can act on.
"""
