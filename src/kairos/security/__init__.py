"""Security building blocks: source tagging, sanitiser, approval, leak guard, provenance.

The plugin that applies them to an agent is :class:`kairos.plugins.defences.InjectionDefences`,
configured with :class:`DefencesConfig` (``[defences]`` in kairos.toml).
"""

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
