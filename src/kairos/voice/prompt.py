"""The system prompt's voice part: how to talk when every word is spoken (book ch6 requirement 35).

It teaches the control tokens :mod:`kairos.voice.speech_text` turns into pauses, rate and style, and
asks for short spoken sentences. It is a plugin's fixed ``system_suffix``: the deployment part of the
system prompt, after the cache boundary, so the shared prefix (base prompt, tools) stays byte-stable
whether or not a deployment speaks.
"""

from __future__ import annotations

from kairos.agent.plugin import Plugin

VOICE_PROMPT = """\
# Voice
Your replies are spoken aloud and the user hears them as you write them. Answer in one to three short
spoken sentences; no lists, tables, markdown, code or URLs. Say numbers the way people say them.
You may add these control tokens; they are never spoken or shown:
[THINKING] a short pause, as when you think before an answer
[PAUSE:500ms] a pause of that length
[SPEED:0.8x] speak slower (below 1) or faster (above 1) from here
[EMO:happy] a tone from here: happy, calm, serious, sad or excited
If a check takes a while, say so first ("Let me check that.") and then give the answer."""


class VoicePrompt(Plugin):
    """Adds :data:`VOICE_PROMPT` to the deployment part of the system prompt."""

    stage = "annotate"

    def system_suffix(self) -> str:
        """The voice part (fixed text: the prompt stays cache-stable)."""
        return VOICE_PROMPT
