// Records the microphone with MediaRecorder in whatever format the browser makes (WebM/Opus in
// Chromium and Firefox, MP4/AAC in Safari); the server decodes them all (docs/HTTP-page.md).

const EXTENSIONS = { "audio/webm": "webm", "audio/ogg": "ogg", "audio/mp4": "m4a", "audio/mpeg": "mp3", "audio/wav": "wav" };

/** Why recording cannot work here, or null when it can. */
export function recordingUnavailable() {
  if (!window.isSecureContext) return "insecure";
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia || !window.MediaRecorder) return "unsupported";
  return null;
}

/** A recording in progress. `onTick(elapsedSeconds, level)` is called ten times a second with the
 * input level (0-1, RMS); it stops by itself at `maxSeconds`. `finished` resolves with
 * {blob, filename, seconds}. */
export class Recording {
  static async start(maxSeconds, onTick) {
    const stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: true, channelCount: 1 },
    });
    return new Recording(stream, maxSeconds, onTick);
  }

  constructor(stream, maxSeconds, onTick) {
    this.stream = stream;
    this.recorder = new MediaRecorder(stream);
    this.context = new AudioContext();
    this.analyser = this.context.createAnalyser();
    this.analyser.fftSize = 1024;
    this.context.createMediaStreamSource(stream).connect(this.analyser);
    const parts = [];
    this.recorder.addEventListener("dataavailable", (e) => { if (e.data.size) parts.push(e.data); });
    this.finished = new Promise((resolve, reject) => {
      this.recorder.addEventListener("stop", () => {
        const type = (this.recorder.mimeType || parts[0]?.type || "audio/webm").split(";")[0];
        const blob = new Blob(parts, { type });
        resolve({ blob, filename: `recording.${EXTENSIONS[type] || "webm"}`, seconds: this.elapsed() });
      });
      this.recorder.addEventListener("error", (e) => reject(e.error || new Error("The recorder failed.")));
    });
    this.finished.then(() => this.release(), () => this.release());
    this.startedAt = performance.now();
    this.stoppedAt = null;
    this.recorder.start(250);
    const samples = new Float32Array(this.analyser.fftSize);
    // a timer, not animation frames: those stop in a hidden tab, and the limit must not
    this.timer = setInterval(() => {
      this.analyser.getFloatTimeDomainData(samples);
      let sum = 0;
      for (const s of samples) sum += s * s;
      const seconds = this.elapsed();
      onTick(seconds, Math.min(1, Math.sqrt(sum / samples.length) * 4));
      if (seconds >= maxSeconds) this.stop();
    }, 100);
  }

  elapsed() {
    return ((this.stoppedAt ?? performance.now()) - this.startedAt) / 1000;
  }

  stop() {
    if (this.stoppedAt !== null) return;
    this.stoppedAt = performance.now();
    clearInterval(this.timer);
    this.recorder.stop();
  }

  release() {
    for (const track of this.stream.getTracks()) track.stop();
    this.context.close();
  }
}
