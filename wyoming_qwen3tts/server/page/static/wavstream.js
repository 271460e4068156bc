// Plays a streamed WAV response while it arrives (docs/HTTP-page.md, "Streamed audio"): the server
// sends a WAV header whose sizes are unknown, then 16-bit PCM as it is decoded. Each piece that
// arrives is scheduled on a Web Audio clock right after the previous one, so playback starts with
// the first piece instead of after the last.

const FIRST_LEAD_S = 0.15; // head start against the next piece arriving late
const MIN_PIECE_S = 0.04; // smaller reads wait for the next one (fewer, longer buffers)
const MAX_HEADER_BYTES = 4096;

/** What every stream did, for the browser test (it checks that pieces played before the end). */
export const streamStats = [];
window.voiceLabStats = { streams: streamStats };

function text4(bytes, at) {
  return String.fromCharCode(bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]);
}

/** The format and where the samples start, or null while the header is still incomplete. */
function parseHeader(bytes) {
  if (bytes.length < 12) return null;
  if (text4(bytes, 0) !== "RIFF" || text4(bytes, 8) !== "WAVE") throw new Error("The server sent audio that is not WAV.");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let format = null;
  for (let at = 12; at + 8 <= bytes.length;) {
    const id = text4(bytes, at);
    const size = view.getUint32(at + 4, true);
    if (id === "data") {
      if (!format) throw new Error("The server's WAV has no format chunk.");
      return { ...format, dataAt: at + 8 };
    }
    if (at + 8 + size > bytes.length) break;
    if (id === "fmt ") {
      format = { channels: view.getUint16(at + 10, true), rate: view.getUint32(at + 12, true),
                 bits: view.getUint16(at + 22, true) };
      if (format.bits !== 16) throw new Error(`The server sent ${format.bits}-bit audio; the page plays 16-bit.`);
    }
    at += 8 + size + (size & 1);
  }
  if (bytes.length > MAX_HEADER_BYTES) throw new Error("The server's WAV header is malformed.");
  return null;
}

function concat(a, b) {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** A complete WAV file of what was played, for the replay control. */
function wavFile(format, chunks) {
  const size = chunks.reduce((sum, c) => sum + c.length, 0);
  const header = new DataView(new ArrayBuffer(44));
  const put = (at, s) => { for (let i = 0; i < 4; i++) header.setUint8(at + i, s.charCodeAt(i)); };
  put(0, "RIFF"); header.setUint32(4, 36 + size, true); put(8, "WAVE");
  put(12, "fmt "); header.setUint32(16, 16, true); header.setUint16(20, 1, true);
  header.setUint16(22, format.channels, true); header.setUint32(24, format.rate, true);
  header.setUint32(28, format.rate * format.channels * 2, true); header.setUint16(32, format.channels * 2, true);
  header.setUint16(34, 16, true); put(36, "data"); header.setUint32(40, size, true);
  return new Blob([header, ...chunks], { type: "audio/wav" });
}

/** One player for the whole page: starting a stream stops the one before. */
export class StreamPlayer {
  constructor(onChange) {
    this.context = null;
    this.current = null;
    this.onChange = onChange || (() => {});
  }

  get playing() {
    return this.current !== null;
  }

  stop() {
    const current = this.current;
    if (!current) return;
    this.current = null;
    current.abort.abort();
    for (const source of current.sources) {
      try { source.stop(); } catch { /* not started yet */ }
    }
    this.onChange(null);
  }

  /** Plays what `open(signal)` (a fetch returning the Response) streams. Resolves with a WAV Blob of
   * the whole audio once it has played; rejects with the request's or the stream's error. A stream
   * stopped by the user resolves with null. */
  async play(label, open) {
    this.stop();
    if (!this.context) this.context = new AudioContext();
    await this.context.resume();
    const current = { label, abort: new AbortController(), sources: [], next: 0 };
    const record = { label, pieces: 0, piecesBeforeLastByte: 0, bytes: 0, ended: false, error: null };
    streamStats.push(record);
    this.current = current;
    this.onChange(label);
    try {
      const response = await open(current.abort.signal);
      const blob = await this.pump(response, current, record);
      if (blob) await this.drained(current);
      record.ended = true;
      return this.current === current ? blob : null;
    } catch (err) {
      if (err.name === "AbortError" || this.current !== current) return null;
      record.error = String(err.message || err);
      throw err;
    } finally {
      if (this.current === current) {
        this.current = null;
        this.onChange(null);
      }
    }
  }

  async pump(response, current, record) {
    const reader = response.body.getReader();
    let pending = new Uint8Array(0);
    let format = null;
    const chunks = [];
    for (;;) {
      const { done, value } = await reader.read();
      if (this.current !== current) return null;
      if (!done) {
        record.piecesBeforeLastByte = record.pieces;
        record.bytes += value.length;
        pending = concat(pending, value);
      }
      if (!format) {
        format = parseHeader(pending);
        if (format) pending = pending.subarray(format.dataAt);
      }
      if (format) {
        const frameBytes = 2 * format.channels;
        const minBytes = Math.ceil(MIN_PIECE_S * format.rate) * frameBytes;
        const usable = done ? pending.length - (pending.length % frameBytes)
                            : (pending.length >= minBytes ? pending.length - (pending.length % frameBytes) : 0);
        if (usable > 0) {
          const piece = pending.slice(0, usable);
          pending = pending.subarray(usable);
          chunks.push(piece);
          this.schedule(piece, format, current);
          record.pieces++;
        }
      }
      if (done) break;
    }
    if (!format) throw new Error("The server's answer ended before any audio.");
    return wavFile(format, chunks);
  }

  schedule(piece, format, current) {
    const samples = new Int16Array(piece.buffer, piece.byteOffset, piece.length / 2);
    const frames = samples.length / format.channels;
    const buffer = this.context.createBuffer(format.channels, frames, format.rate);
    for (let ch = 0; ch < format.channels; ch++) {
      const out = buffer.getChannelData(ch);
      for (let i = 0; i < frames; i++) out[i] = samples[i * format.channels + ch] / 32768;
    }
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    const now = this.context.currentTime;
    const at = current.next > now ? current.next : now + FIRST_LEAD_S;
    source.start(at);
    current.next = at + buffer.duration;
    current.sources.push(source);
  }

  /** Resolves once the scheduled audio has played (or the stream was stopped). */
  drained(current) {
    return new Promise((resolve) => {
      const check = () => {
        if (this.current !== current || this.context.currentTime >= current.next) resolve();
        else setTimeout(check, 50);
      };
      check();
    });
  }
}
