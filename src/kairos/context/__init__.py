"""What the model sees and what a session keeps.

Requests are built by :mod:`~kairos.context.builder` (a byte-stable prefix, the append-only
trajectory, a trailing status) and checked by :mod:`~kairos.context.audit`. Sessions
(:mod:`~kairos.context.session`) persist behind the :class:`~kairos.context.store.TrajectoryStore`
protocol — SQLite by default (:mod:`~kairos.context.store_sqlite`), PostgreSQL for several processes
(:mod:`~kairos.context.store_pg`) —, take in events through their inbox
(:mod:`~kairos.context.inbox`) and have one writer at a time (the store's lease).
:mod:`~kairos.context.compression` keeps long sessions inside the window; :mod:`~kairos.context.errors`
writes tool error reports the model can act on.
"""
