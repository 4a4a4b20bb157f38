"""The runtime's integrations: mail, async tasks, timers, the outbox, file watches and the calendar.

Each is a component the :class:`~kairos.runtime.Runtime` starts, with its records in the runtime's
database and its tools in a toolset (:mod:`kairos.tools.toolsets.registry`). They build on the core
(:mod:`kairos.runtime.runtime`, bus, events, urgency, handlers); the core does not import them, so a
runtime runs with none of them. Which are leader-owned in a deployment (timers, watch, mail: one owner,
never one per worker) is the registry's ``leader_owned`` flag (see :mod:`kairos.runtime.leader`).
"""
