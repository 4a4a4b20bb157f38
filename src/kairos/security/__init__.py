"""Prompt-injection defences: source tagging, warning, sanitiser, approval, leak guard, provenance.

Plug :class:`InjectionDefences` into an agent as an extension; configure it with
:class:`DefencesConfig` (``[defences]`` in kairos.toml). See ``defences`` for what each part does.
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
    InjectionDefences,
    MemoryVerdict,
    Provenance,
    ProvenanceGuard,
    SecurityEvent,
    SecurityLog,
    security_log,
    with_warning,
)
from kairos.security.leak import LeakGuard
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
    "InjectionDefences",
    "LeakGuard",
    "InteractiveApprover",
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
