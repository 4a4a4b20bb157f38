"""Security building blocks: source tagging, sanitiser, approval, leak guard, provenance.

The plugin that applies them to an agent is :class:`kairos.plugins.defences.InjectionDefences`,
configured with :class:`DefencesConfig` (``[defences]`` in kairos.toml).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kairos._lazy import lazy_exports

if TYPE_CHECKING:
    from kairos.security.approval import (
        AllowApprover,
        ApprovalRequest,
        Approver,
        CallbackApprover,
        Decision,
        DenyApprover,
        InteractiveApprover,
        make_approver,
    )
    from kairos.security.defences import (
        INJECTION_WARNING,
        DefencesConfig,
        SecurityEvent,
        SecurityLog,
        security_log,
        with_warning,
    )
    from kairos.security.leak import LeakGuard
    from kairos.security.provenance import MemoryVerdict, Provenance, ProvenanceGuard
    from kairos.security.sanitize import find_suspicious, sanitize, wrap_external, wrapped_source

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "kairos.security.approval": "AllowApprover ApprovalRequest Approver CallbackApprover Decision DenyApprover "
        "InteractiveApprover make_approver",
        "kairos.security.defences": "INJECTION_WARNING DefencesConfig SecurityEvent SecurityLog security_log "
        "with_warning",
        "kairos.security.leak": "LeakGuard",
        "kairos.security.provenance": "MemoryVerdict Provenance ProvenanceGuard",
        "kairos.security.sanitize": "find_suspicious sanitize wrap_external wrapped_source",
    },
)

__all__ = [
    "INJECTION_WARNING",
    "AllowApprover",
    "ApprovalRequest",
    "Approver",
    "CallbackApprover",
    "Decision",
    "DefencesConfig",
    "DenyApprover",
    "InteractiveApprover",
    "LeakGuard",
    "MemoryVerdict",
    "Provenance",
    "ProvenanceGuard",
    "SecurityEvent",
    "SecurityLog",
    "find_suspicious",
    "make_approver",
    "sanitize",
    "security_log",
    "with_warning",
    "wrap_external",
    "wrapped_source",
]
