"""One reply's synthesis: speakable items in, audio blocks out, in order, on a thread of its own.

The reply's text arrives faster than it can be said and synthesis takes CPU, so each reply gets a
thread that renders its items as they come (:func:`kairos.voice.tts.speak`) and hands every block
back to the event loop. Cancelling stops it before the next item; :meth:`Speaker.join` waits for the
item in progress (a process must not exit while a thread is inside the synthesiser).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator

from kairos.voice.speech_text import SpeechItem
from kairos.voice.tts import AudioBlock, Synthesizer, speak


class Speaker:
    """Renders items in a thread; ``on_block``, ``on_error`` and ``on_done`` are called on ``loop``, in order."""

    def __init__(
        self,
        synth: Synthesizer,
        loop: asyncio.AbstractEventLoop,
        on_block: Callable[[AudioBlock], None],
        on_error: Callable[[str], None],
        on_done: Callable[[], None],
    ) -> None:
        self._items: list[SpeechItem | None] = []
        self._ready = threading.Condition()
        self._loop = loop
        self.cancelled = False
        self.finished = False
        """Every block was handed over (or synthesis failed, or it was cancelled)."""
        self._callbacks = (on_block, on_error, on_done)
        self._thread = threading.Thread(target=self._run, args=(synth,), daemon=True, name="voice-tts")
        self._thread.start()

    def say(self, items: list[SpeechItem]) -> None:
        """Queue items (text chunks and directives)."""
        with self._ready:
            self._items.extend(items)
            self._ready.notify()

    def close(self) -> None:
        """No more items: the thread ends after the queued ones."""
        with self._ready:
            self._items.append(None)
            self._ready.notify()

    def cancel(self) -> None:
        """Stop before the next item; nothing more is handed over."""
        self.cancelled = True
        self.close()

    def join(self, timeout_s: float) -> None:
        """Wait for the thread (a blocking call: run it off the loop)."""
        self._thread.join(timeout_s)

    def _pull(self) -> Iterator[SpeechItem]:
        while True:
            with self._ready:
                while not self._items:
                    self._ready.wait()
                item = self._items.pop(0)
            if item is None or self.cancelled:
                return
            yield item

    def _call(self, fn: Callable[..., None], *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens any more
            self._loop.call_soon_threadsafe(fn, *args)

    def _run(self, synth: Synthesizer) -> None:
        on_block, on_error, on_done = self._callbacks
        try:
            for block in speak(synth, self._pull()):
                if self.cancelled:
                    return
                self._call(on_block, block)
        except Exception as exc:  # a synthesiser failure is reported, never taking the session down
            self._call(on_error, f"speech synthesis failed: {exc}")
        finally:  # after the blocks, so the loop learns it in order
            self._call(self._finish, on_done)

    def _finish(self, on_done: Callable[[], None]) -> None:
        self.finished = True
        on_done()
