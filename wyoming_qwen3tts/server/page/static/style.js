// The third way to make a voice: a preset speaker of a 1.7B CustomVoice model, spoken in a style
// given in words (docs/HTTP.md, "Styled voices").

import { $, showError } from "./ui.js";

/** The speaker list from /api/info's `speakers` ({speaker, description}), by their descriptions. */
export function fillSpeakers(speakers) {
  $("speaker").replaceChildren(...speakers.map((s) => new Option(s.description || s.speaker, s.speaker)));
}

/** The speaker and style to send, or null with what is missing said next to the style box. */
export function styleFields() {
  const speaker = $("speaker").value;
  const instruct = $("style").value.trim();
  if (!speaker || !instruct) {
    showError("style-error", speaker ? "Say how the speaker should speak." : "Choose a speaker.");
    return null;
  }
  return { speaker, instruct };
}

/** "uncle_fu" as "Uncle Fu", the way the server names its preset speakers. */
export function speakerTitle(speaker) {
  return speaker.split("_").map((w) => w.charAt(0).toUpperCase() + w.slice(1)).join(" ");
}
