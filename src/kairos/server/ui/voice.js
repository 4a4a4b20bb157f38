// The microphone in the chat composer (issue 27 §4): talk to the session, hear the reply, barge in.
//
// Capture: getUserMedia (echo cancellation and noise suppression on) into an AudioWorklet (voice_capture.js)
// that posts 16 kHz int16 chunks, sent as binary frames on /v1/sessions/<id>/voice. The server's frames:
// voice events (transcripts, the reply's speakable text, barge-in, the turn's latency waterfall) as JSON,
// reply audio as binary 16 kHz int16, played back to back, and {"type":"stop"}: silence at once.
// The user's words reach the chat through the session's stream like typed ones (the interim transcript is
// shown greyed until then); the agent's text streams there too, control tokens removed (chat_render.js).
import { openSocket } from "./api.js";
import { h, toast } from "./dom.js";

const RATE = 16000;
const WORKLET = "/ui/voice_capture.js";
const STATES = {
  off: "",
  connecting: "connecting…",
  listening: "listening",
  hearing: "hearing you",
  thinking: "thinking",
  speaking: "speaking",
};
const CLOSED = {
  1008: "the server refused the microphone's connection (the token?)",
  4404: "there is no such session",
  1012: "the server is stopping",
};
const STAGES = [
  ["eos_wait_ms", "end of speech"],
  ["asr_final_ms", "transcript"],
  ["llm_first_token_ms", "first token"],
  ["first_audio_ms", "first audio"],
];

function ms(v) {
  return `${Math.round(v)} ms`;
}

/**
 * One turn's latency waterfall: bars on a shared axis from the end of the user's speech. The end-of-speech
 * wait ends at the decision; the other stages are timed from that decision (a speculated first token can
 * come before it).
 */
export function waterfall(data) {
  const eos = Number(data.eos_wait_ms) || 0;
  const rows = [];
  for (const [key, label] of STAGES) {
    const v = data[key];
    if (v === null || v === undefined) continue;
    const [from, to] = key === "eos_wait_ms" ? [0, eos] : [Math.min(eos, eos + v), Math.max(eos, eos + v)];
    rows.push({ key, label, v, from, to });
  }
  const lo = Math.min(0, ...rows.map((r) => r.from));
  const hi = Math.max(1, ...rows.map((r) => r.to));
  const audio = rows.find((r) => r.key === "first_audio_ms");
  const spec = data.speculation && data.speculation !== "none" ? `, speculation: ${data.speculation}` : "";
  const summary = audio ? `First audio ${ms(audio.to)} after you stopped speaking${spec}` : `Voice turn${spec}`;
  const el = h("figure.waterfall", { "aria-label": `Voice latency: ${summary}` },
    h("figcaption.small.muted", summary),
    rows.map((r) => {
      const bar = h(`span.wf-bar.wf-${r.key.replace(/_ms$/, "").replaceAll("_", "-")}`);
      bar.style.setProperty("margin-left", `${(100 * (r.from - lo)) / (hi - lo)}%`);
      bar.style.setProperty("width", `${Math.max(0.5, (100 * (r.to - r.from)) / (hi - lo))}%`);
      return h("div.wf-row", h("span.wf-label", r.label), h("span.wf-track", bar), h("span.wf-value", ms(r.v)));
    }));
  return el;
}

/** The mic button and its live line (state and the words being spoken). conv: the chat's Conversation. */
export class Voice {
  constructor(sid, conv) {
    this.sid = sid;
    this.conv = conv;
    this.state = "off";
    this.ws = null;
    this.ctx = null;
    this.media = null;
    this.node = null;
    this.sources = new Set();
    this.playEnd = 0;
    this.speech = false;
    this.label = h("span.voice-label", "Talk");
    // the label says what a press does (not a toggle with aria-pressed: its label would have to stay the same)
    this.button = h("button.voice-mic#voice-mic", {
      type: "button",
      dataset: { state: "off" },
      title: "Talk to kairos: speak, hear the answer, speak again to cut in",
      on: { click: () => this.toggle() },
    }, h("span.mic-dot", { "aria-hidden": "true" }), this.label);
    this.status = h("span.voice-state#voice-state", { role: "status", "aria-live": "polite" });
    this.caption = h("span.voice-caption#voice-caption", { "aria-live": "off" });
    this.line = h("p.voice-line.small#voice-line", { hidden: true }, this.status, this.caption);
    /** The button goes beside the composer's Send button; the line under them. */
  }

  toggle() {
    if (this.state === "off") this.start();
    else this.stop();
  }

  set(state) {
    this.state = state;
    this.button.dataset.state = state;
    this.label.textContent = state === "off" ? "Talk" : "Stop talking";
    this.status.textContent = STATES[state];
    this.line.hidden = state === "off";
  }

  /** The state the audio says: speaking while reply audio plays, else hearing/thinking/listening. */
  settle(busy = this.state === "thinking") {
    if (this.state === "off" || this.state === "connecting") return;
    if (this.sources.size) this.set("speaking");
    else if (this.speech) this.set("hearing");
    else this.set(busy ? "thinking" : "listening");
  }

  async start() {
    this.set("connecting");
    this.caption.textContent = "";
    let ctx = null;
    let media = null;
    const stale = () => this.state === "off" || this.ctx !== ctx; // stopped (or the view left) meanwhile
    try {
      if (!navigator.mediaDevices || !window.AudioWorkletNode) {
        throw new Error("this page cannot use a microphone here (it needs https or localhost)");
      }
      ctx = new AudioContext(); // made in the click, so it may play
      this.ctx = ctx;
      media = await navigator.mediaDevices.getUserMedia({
        audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
      });
      if (stale()) {
        for (const t of media.getTracks()) t.stop();
        return;
      }
      this.media = media;
      await ctx.audioWorklet.addModule(WORKLET);
      if (stale()) return;
      this.connect();
      const source = ctx.createMediaStreamSource(media);
      this.node = new AudioWorkletNode(ctx, "kairos-capture", { numberOfInputs: 1, numberOfOutputs: 0 });
      this.node.port.onmessage = (ev) => {
        if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(ev.data);
      };
      source.connect(this.node);
      this.source = source;
    } catch (e) {
      if (stale()) {
        if (media && this.media !== media) for (const t of media.getTracks()) t.stop();
        return;
      }
      const why = e && e.name === "NotAllowedError" ? "the microphone was not allowed" : (e && e.message) || String(e);
      this.fail(`The microphone did not start: ${why}`);
    }
  }

  /** The session's run ended (chat.js): with no reply audio coming, the floor is the user's again. */
  runEnded() {
    clearTimeout(this.idle);
    this.idle = setTimeout(() => {
      if (this.state === "thinking" && !this.sources.size) this.settle(false);
    }, 1500);
  }

  connect() {
    const ws = openSocket(`/v1/sessions/${encodeURIComponent(this.sid)}/voice`, "kairos.voice");
    this.ws = ws;
    ws.onopen = () => ws.send(JSON.stringify({ type: "hello", sample_rate: RATE }));
    ws.onmessage = (ev) => {
      if (ws !== this.ws) return;
      if (typeof ev.data !== "string") this.play(ev.data);
      else this.onFrame(JSON.parse(ev.data));
    };
    ws.onclose = (ev) => {
      if (ws !== this.ws) return;
      this.ws = null;
      if (this.state !== "off") {
        const why = this.lastError || CLOSED[ev.code] || `the connection closed (${ev.code})`;
        this.fail(`Voice stopped: ${why}`);
      }
    };
  }

  onFrame(f) {
    if (f.type === "ready") this.set("listening");
    else if (f.type === "stop") this.silence();
    else if (f.type === "error") {
      this.lastError = f.error.message;
      this.caption.textContent = f.error.message;
      toast(`Voice: ${f.error.message}`);
    } else if (f.type === "voice") this.onVoice(f);
  }

  onVoice({ kind, text, data }) {
    const conv = this.conv;
    switch (kind) {
      case "speech_start":
        this.speech = true;
        conv.heardVoice = false;
        conv.showInterim("…");
        this.settle();
        break;
      case "interim":
        if (text.trim()) conv.showInterim(text);
        break;
      case "final":
        this.speech = false;
        if (!text.trim() || conv.heardVoice) conv.dropInterim();
        else conv.showInterim(text, true);
        this.settle(Boolean(text.trim()));
        break;
      case "backchannel":
        this.speech = false;
        conv.dropInterim();
        this.settle();
        break;
      case "reply_text":
        this.caption.textContent = text;
        break;
      case "paused":
        this.caption.textContent = "paused: you are speaking";
        break;
      case "resumed":
        this.caption.textContent = "going on";
        break;
      case "cut":
        conv.append(h("div.msg.note.voice-cut", text ? `You cut in; heard up to: “${text}”` : "You cut in."));
        this.caption.textContent = "";
        this.settle(true);
        break;
      case "turn":
        conv.append(waterfall(data));
        break;
      case "error":
        conv.dropInterim();
        this.caption.textContent = text;
        toast(`Voice: ${text}`);
        this.settle(false);
        break;
      default:
        break;
    }
  }

  /** One block of reply audio: queued right behind what plays. */
  play(buffer) {
    if (!this.ctx || this.state === "off") return;
    const pcm = new Int16Array(buffer);
    if (!pcm.length) return;
    const samples = new Float32Array(pcm.length);
    for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 32768;
    const block = this.ctx.createBuffer(1, samples.length, RATE);
    block.copyToChannel(samples, 0);
    const src = this.ctx.createBufferSource();
    src.buffer = block;
    src.connect(this.ctx.destination);
    const at = Math.max(this.ctx.currentTime, this.playEnd);
    src.start(at);
    this.playEnd = at + block.duration;
    this.sources.add(src);
    src.onended = () => {
      this.sources.delete(src);
      if (!this.sources.size) {
        this.caption.textContent = "";
        this.settle(false);
      }
    };
    this.settle();
  }

  /** Barge-in: every queued and playing buffer stops now. */
  silence() {
    for (const src of this.sources) {
      src.onended = null;
      try {
        src.stop();
      } catch {
        // not started yet on some browsers: dropped with the rest
      }
    }
    this.sources.clear();
    this.playEnd = 0;
    this.settle();
  }

  release() {
    if (this.node) {
      this.node.port.postMessage("stop");
      this.node.port.onmessage = null;
    }
    if (this.source) this.source.disconnect();
    if (this.media) for (const t of this.media.getTracks()) t.stop();
    this.silence();
    if (this.ctx) this.ctx.close().catch(() => {});
    this.node = this.source = this.media = this.ctx = null;
  }

  stop() {
    clearTimeout(this.idle);
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close(1000);
    this.release();
    this.speech = false;
    this.lastError = "";
    this.conv.dropInterim();
    this.set("off");
  }

  fail(message) {
    toast(message);
    this.stop();
    this.caption.textContent = message;
  }

  close() {
    if (this.state !== "off") this.stop();
  }
}
