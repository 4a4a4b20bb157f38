// The microphone's AudioWorklet (loaded by voice.js under the page's script-src 'self'): the input at the
// context's rate (48 or 44.1 kHz) low-passed below 8 kHz, resampled to 16 kHz mono int16, posted to the
// page in 60 ms chunks (transferred, not copied).
const OUT_RATE = 16000;
const CHUNK = 960; // 60 ms at 16 kHz
const TAPS = 63;

/** A Hann-windowed sinc low-pass at the input rate, cutoff just under the output's Nyquist frequency. */
function lowPass(rate) {
  const cutoff = Math.min(0.5, (0.45 * OUT_RATE) / rate); // cycles per input sample
  const taps = new Float32Array(TAPS);
  const mid = (TAPS - 1) / 2;
  let sum = 0;
  for (let i = 0; i < TAPS; i++) {
    const x = i - mid;
    const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
    taps[i] = sinc * (0.5 - 0.5 * Math.cos((2 * Math.PI * i) / (TAPS - 1)));
    sum += taps[i];
  }
  for (let i = 0; i < TAPS; i++) taps[i] /= sum;
  return taps;
}

class Capture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / OUT_RATE; // input samples per output sample
    this.taps = lowPass(sampleRate);
    this.ring = new Float32Array(TAPS);
    this.at = 0;
    this.next = 0; // where the next output sample falls, in input samples after the current one
    this.prev = 0;
    this.chunk = new Int16Array(CHUNK);
    this.fill = 0;
    this.on = true;
    this.port.onmessage = (ev) => {
      if (ev.data === "stop") this.on = false;
    };
  }

  emit(v) {
    const s = Math.max(-1, Math.min(1, v));
    this.chunk[this.fill++] = Math.round(s * 32767);
    if (this.fill === CHUNK) {
      this.port.postMessage(this.chunk.buffer, [this.chunk.buffer]);
      this.chunk = new Int16Array(CHUNK);
      this.fill = 0;
    }
  }

  process(inputs) {
    if (!this.on) return false;
    const input = inputs[0];
    const ch = input && input[0];
    if (!ch) return true;
    const { ring, taps } = this;
    for (let n = 0; n < ch.length; n++) {
      ring[this.at] = ch[n];
      this.at = (this.at + 1) % TAPS;
      let y = 0;
      for (let k = 0, j = this.at; k < TAPS; k++, j = j + 1 === TAPS ? 0 : j + 1) y += taps[k] * ring[j];
      while (this.next <= 0) { // between the previous filtered sample (at -1) and this one (at 0)
        this.emit(this.prev + (y - this.prev) * (this.next + 1));
        this.next += this.step;
      }
      this.next -= 1;
      this.prev = y;
    }
    return true;
  }
}

registerProcessor("kairos-capture", Capture);
