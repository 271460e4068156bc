// Making a voice: a clip (recorded or uploaded) and its transcript, a description in words, or a
// preset speaker with a style; a streamed preview; saving it (docs/HTTP.md, "The page").

import { formOf, request, sendJson } from "./api.js";
import { Recording, recordingUnavailable } from "./recorder.js";
import { fillSpeakers, styleFields } from "./style.js";
import { $, busy, clearError, languageName, showError, status } from "./ui.js";

const INSECURE_NOTE = "Recording needs a secure connection, and this page was opened over plain http, so the " +
  "browser does not give it the microphone (the Home Assistant companion app neither, unless it connects over " +
  "https). Open Home Assistant over https (Home Assistant Cloud, or your own certificate) to record here — or " +
  "record with any app on your phone or computer and upload the file below.";
const UNSUPPORTED_NOTE = "This browser cannot record audio. Record with another app and upload the file below.";

const MIC_ERRORS = {
  NotAllowedError: "The microphone was not allowed. Allow it for this site in the browser's settings, or upload a file.",
  NotFoundError: "No microphone was found. Connect one, or upload a file.",
  NotReadableError: "The microphone is in use by another program.",
};

export class VoiceMaker {
  constructor(info, player, voices) {
    this.info = info;
    this.player = player;
    this.voices = voices;
    this.clip = null; // {blob, filename}
    this.clipUrl = null;
    this.recording = null;
    this.limits = { max_upload_mb: 20, min_clip_s: 3, max_clip_s: 30, ...(info.limits || {}) };
  }

  setup() {
    this.fillLanguages();
    this.offerWays();
    for (const radio of document.querySelectorAll("input[name=transcript-mode]")) {
      radio.addEventListener("change", () => this.showTranscriptMode());
    }
    $("transcribe").hidden = !this.info.asr;
    const why = recordingUnavailable();
    if (why) {
      $("mic-note").textContent = why === "insecure" ? INSECURE_NOTE : UNSUPPORTED_NOTE;
      $("mic-note").hidden = false;
      $("record-row").hidden = true;
    }
    $("record").addEventListener("click", () => this.record());
    $("stop").addEventListener("click", () => this.recording && this.recording.stop());
    $("upload").addEventListener("change", () => this.upload());
    $("transcribe").addEventListener("click", () => this.transcribe());
    $("preview").addEventListener("click", () => this.preview());
    $("save-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.save();
    });
  }

  /** The ways to make a voice that the server's models allow: a choice only when there are several. */
  offerWays() {
    const ways = { recording: this.info.can_clone, description: this.info.can_design, style: this.info.can_style };
    const radios = [...document.querySelectorAll("input[name=source]")];
    for (const radio of radios) {
      radio.closest("label").hidden = !ways[radio.value];
      radio.addEventListener("change", () => this.showSource());
    }
    const offered = radios.filter((r) => ways[r.value]);
    if (!offered.length) {
      $("make-body").hidden = true;
      $("cannot-make").hidden = false;
      return;
    }
    if (this.info.can_style) fillSpeakers(this.info.speakers || []);
    offered[0].checked = true;
    $("source-choice").hidden = offered.length < 2;
    this.showSource();
  }

  fillLanguages() {
    const select = $("language");
    const languages = this.info.languages || [];
    select.replaceChildren(...languages.map((code) => new Option(languageName(code), code)));
    // the browser's language when the server has it, else "auto" when offered, else the first
    const mine = navigator.language.toLowerCase();
    const preferred = languages.find((l) => l.toLowerCase() === mine)
      || languages.find((l) => l.toLowerCase() === mine.split("-")[0])
      || languages.find((l) => l.toLowerCase() === languageName(mine.split("-")[0]).toLowerCase())
      || languages.find((l) => l.toLowerCase() === "auto");
    if (preferred) select.value = preferred;
  }

  /** recording, description or style. */
  get source() {
    return document.querySelector("input[name=source]:checked").value;
  }

  /** Where a refusal of the audio (413, 415) goes: next to Record and Upload in the recording way;
   * in the others that error is hidden, and a 413 there is the sample sentence's, for the button. */
  get audioErrorId() {
    return this.source === "recording" ? "audio-error" : null;
  }

  get timbreOnly() {
    return document.querySelector("input[name=transcript-mode]:checked").value === "none";
  }

  showSource() {
    $("from-recording").hidden = this.source !== "recording";
    $("from-description").hidden = this.source !== "description";
    $("from-style").hidden = this.source !== "style";
  }

  showTranscriptMode() {
    $("transcript").disabled = this.timbreOnly;
    $("transcribe").disabled = this.timbreOnly;
  }

  setClip(clip, label) {
    this.clip = clip;
    if (this.clipUrl) URL.revokeObjectURL(this.clipUrl);
    this.clipUrl = URL.createObjectURL(clip.blob);
    $("clip-player").src = this.clipUrl;
    $("clip-label").textContent = label;
    $("clip-row").hidden = false;
  }

  async record() {
    clearError("audio-error");
    const { min_clip_s: min, max_clip_s: max } = this.limits;
    let recording;
    try {
      recording = await Recording.start(max, (seconds, level) => {
        $("countdown").textContent = seconds < min ? `${seconds.toFixed(0)} s — keep going, at least ${min} s`
          : `${Math.max(0, max - seconds).toFixed(0)} s left`;
        $("level").value = level;
      });
    } catch (err) {
      showError("audio-error", MIC_ERRORS[err.name] || `The microphone could not be opened: ${err.message}`);
      return;
    }
    this.recording = recording;
    $("record").disabled = true;
    $("upload").disabled = true;
    $("stop").disabled = false;
    $("stop").focus();
    status(`Recording… up to ${max} s. Press Stop when you are done.`);
    try {
      const clip = await recording.finished;
      if (clip.seconds < min) {
        showError("audio-error", `That was ${clip.seconds.toFixed(1)} s; a clone needs at least ${min} s. ` +
                  "Record again.");
        status("Recording too short.");
      } else {
        this.setClip(clip, `Your recording (${clip.seconds.toFixed(0)} s)`);
        status(`Recorded ${clip.seconds.toFixed(0)} s. Listen to it, then preview the voice.`);
      }
    } catch (err) {
      showError("audio-error", `The recording failed: ${err.message}`);
    } finally {
      this.recording = null;
      $("record").disabled = false;
      $("upload").disabled = false;
      $("stop").disabled = true;
      $("level").value = 0;
      $("countdown").textContent = "";
      $("record").focus();
    }
  }

  upload() {
    clearError("audio-error");
    const file = $("upload").files[0];
    if (!file) return;
    if (file.size > this.limits.max_upload_mb * 1024 * 1024) {
      showError("audio-error", `${file.name} is ${(file.size / 1048576).toFixed(1)} MB; the limit is ` +
                `${this.limits.max_upload_mb} MB. Upload a shorter clip (${this.limits.max_clip_s} s are enough).`);
      return;
    }
    this.setClip({ blob: file, filename: file.name }, `Uploaded: ${file.name}`);
    status(`${file.name} is ready. Preview the voice or save it.`);
  }

  /** The clip and transcript, or an error in the control that lacks them. */
  cloneFields() {
    if (!this.clip) {
      showError("audio-error", "Record or upload a clip first.");
      return null;
    }
    const transcript = this.timbreOnly ? "" : $("transcript").value.trim();
    if (!this.timbreOnly && !transcript) {
      showError("transcript-error", "Type what the clip says, or choose “No transcript”.");
      return null;
    }
    return { transcript };
  }

  instruct() {
    const instruct = $("instruct").value.trim();
    if (!instruct) showError("instruct-error", "Describe the voice first.");
    return instruct || null;
  }

  /** What the chosen way sends besides the name, language and text: `json` fields (a
   * description, or a speaker and its style) or `form` fields with the clip; null when something
   * is missing (said next to its control). */
  made() {
    if (this.source === "description") {
      const instruct = this.instruct();
      return instruct && { json: { instruct } };
    }
    if (this.source === "style") {
      const fields = styleFields();
      return fields && { json: fields };
    }
    const fields = this.cloneFields();
    return fields && { form: fields };
  }

  async transcribe() {
    if (!this.clip) return showError("transcript-error", "Record or upload a clip first.");
    await busy($("transcribe"), "transcript-error", async () => {
      status("Transcribing…");
      const response = await request("api/transcribe", { method: "POST", body: formOf({}, this.clip) });
      $("transcript").value = (await response.json()).text;
      status("Transcribed. Check the words and correct them if needed.");
    });
  }

  async preview() {
    for (const id of ["audio-error", "transcript-error", "instruct-error", "style-error"]) clearError(id);
    const text = $("sample").value.trim();
    if (!text) return showError("preview-error", "Type a sample sentence.");
    const language = $("language").value;
    const made = this.made();
    if (!made) return;
    const init = made.json
      ? { headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ...made.json, text, language }) }
      : { body: formOf({ ...made.form, language, text }, this.clip) };
    await busy($("preview"), "preview-error", async () => {
      status("Making the preview…");
      const wav = await this.player.play("preview", (signal) => request("api/preview", { method: "POST", ...init, signal }));
      if (!wav) return;
      const player = $("preview-player");
      if (player.src) URL.revokeObjectURL(player.src);
      player.src = URL.createObjectURL(wav);
      $("compare-clip").hidden = this.source !== "recording";
      if (this.source === "recording") $("compare-player").src = this.clipUrl;
      $("preview-row").hidden = false;
      status("Preview played. Save the voice if you like it.");
    }, this.audioErrorId);
  }

  async save() {
    for (const id of ["audio-error", "transcript-error", "instruct-error", "style-error", "save-error"]) clearError(id);
    const name = $("name").value.trim();
    const language = $("language").value;
    const description = $("description").value.trim();
    if (!name) {
      showError("save-error", "Give the voice a name.");
      $("name").focus();
      return;
    }
    if (this.voices.has(name)) {
      showError("save-error", `There is already a voice called ${name}. Choose another name.`);
      return;
    }
    const made = this.made();
    if (!made) return;
    const send = made.json ? () => sendJson("POST", "api/voices", { ...made.json, name, language, description })
      : () => request("api/voices", { method: "POST", body: formOf({ ...made.form, name, language, description },
                                                                    this.clip) });
    const saved = await busy($("save"), "save-error", async () => {
      status(`Saving ${name}…`);
      await send();
      return true;
    }, this.audioErrorId);
    if (!saved) return status("Not saved.");
    status(`Saved ${name}.`);
    $("name").value = "";
    $("description").value = "";
    await this.voices.refresh();
  }
}
