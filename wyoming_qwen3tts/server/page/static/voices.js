// The voices list: every voice with its kind and a Play button; Rename and Delete for the user's own.

import { getJson, request, sendJson } from "./api.js";
import { speakerTitle } from "./style.js";
import { $, busy, clearError, element, languageName, showError, status, uniqueId } from "./ui.js";

const KINDS = { preset: "Preset", config: "From config", saved: "Cloned", designed: "Designed", styled: "Styled" };

export class VoiceList {
  /** `player` plays /api/speak; `sampleText()` is what Play says. */
  constructor(player, sampleText, allLanguages) {
    this.player = player;
    this.sampleText = sampleText;
    this.allLanguages = new Set(allLanguages);
    this.voices = [];
  }

  async refresh() {
    clearError("voices-error");
    try {
      this.voices = await getJson("api/voices");
    } catch (err) {
      showError("voices-error", `The voices could not be listed: ${err.message}`);
      return;
    }
    const rows = this.voices.map((voice) => this.row(voice));
    $("voice-rows").replaceChildren(...rows);
  }

  /** Keyboard focus back on a voice's first button after its row was drawn again. */
  focusRow(name) {
    const row = [...$("voice-rows").rows].find((r) => r.dataset.voice === name);
    if (row) row.querySelector("button")?.focus();
  }

  has(name) {
    return this.voices.some((v) => v.name.toLowerCase() === name.toLowerCase());
  }

  row(voice) {
    // a voice that speaks every language of the model says nothing; one that has its own says which
    const own = (voice.languages || []).filter((l) => l !== "auto");
    const every = own.length >= this.allLanguages.size - (this.allLanguages.has("auto") ? 1 : 0);
    const languages = every ? "" : own.map(languageName).join(", ");
    const name = element("td", { className: "voice-name" }, element("span", { textContent: voice.name }));
    if (languages) name.append(element("span", { className: "languages", textContent: languages }));
    const about = element("td", { textContent: voice.description || "" });
    if (voice.kind === "styled") {  // which speaker, in which style
      const style = `${speakerTitle(voice.speaker)}: ${voice.instruct}`;
      about.append(element("span", { className: "detail", textContent: style }));
    }
    const actions = element("td", { className: "actions" });
    const tr = element("tr", {}, name, element("td", { textContent: KINDS[voice.kind] || voice.kind }), about, actions);
    tr.dataset.voice = voice.name;
    this.showActions(voice, actions);
    return tr;
  }

  showActions(voice, cell) {
    const error = element("p", { id: uniqueId("voice-error"), className: "error", role: "alert", hidden: true });
    const play = this.button("Play", voice, () => this.play(voice, play, error.id));
    const buttons = element("div", { className: "row" }, play);
    if (voice.editable) {
      buttons.append(this.button("Rename", voice, () => this.renameForm(voice, cell)),
                     this.button("Delete", voice, () => this.confirmDelete(voice, cell)));
    }
    cell.replaceChildren(buttons, error);
  }

  /** A cancelled rename or delete: the row's buttons again, with the keyboard focus on them. */
  backToActions(voice, cell) {
    this.showActions(voice, cell);
    cell.querySelector("button").focus();
  }

  /** A button whose visible text is `verb` and whose accessible name also says which voice. */
  button(verb, voice, onClick) {
    const b = element("button", { type: "button", textContent: verb });
    b.setAttribute("aria-label", `${verb} ${voice.name}`);
    b.addEventListener("click", onClick);
    return b;
  }

  async play(voice, button, errorId) {
    await busy(button, errorId, async () => {
      status(`Playing ${voice.name}…`);
      const body = JSON.stringify({ voice: voice.name, text: this.sampleText() });
      const done = await this.player.play(`voice ${voice.name}`, (signal) => request("api/speak", {
        method: "POST", headers: { "Content-Type": "application/json" }, body, signal }));
      if (done) status(`Played ${voice.name}.`);
    });
  }

  renameForm(voice, cell) {
    const id = uniqueId("rename");
    const input = element("input", { id, value: voice.name, maxLength: 40, autocomplete: "off" });
    const errorId = `${id}-error`;
    const apply = element("button", { type: "submit", textContent: "Apply" });
    const cancel = element("button", { type: "button", textContent: "Cancel" });
    const form = element("form", { className: "inline" },
                         element("label", { htmlFor: id, textContent: `New name for ${voice.name}` }), input,
                         element("div", { className: "row" }, apply, cancel),
                         element("p", { id: errorId, className: "error", role: "alert", hidden: true }));
    cancel.addEventListener("click", () => this.backToActions(voice, cell));
    form.addEventListener("keydown", (e) => { if (e.key === "Escape") this.backToActions(voice, cell); });
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const name = input.value.trim();
      if (!name) return showError(errorId, "Type a name.");
      if (name === voice.name) return this.backToActions(voice, cell);
      const ok = await busy(apply, errorId, async () => {
        await sendJson("PATCH", `api/voices/${encodeURIComponent(voice.name)}`, { name });
        return true;
      });
      if (ok) {
        status(`Renamed ${voice.name} to ${name}.`);
        await this.refresh();
        this.focusRow(name);
      }
    });
    cell.replaceChildren(form);
    input.focus();
    input.select();
  }

  confirmDelete(voice, cell) {
    const errorId = uniqueId("delete");
    const yes = element("button", { type: "button", className: "danger", textContent: "Yes, delete" });
    yes.setAttribute("aria-label", `Yes, delete ${voice.name}`);
    const no = element("button", { type: "button", textContent: "Cancel" });
    no.addEventListener("click", () => this.backToActions(voice, cell));
    yes.addEventListener("click", async () => {
      const ok = await busy(yes, errorId, async () => {
        await request(`api/voices/${encodeURIComponent(voice.name)}`, { method: "DELETE" });
        return true;
      });
      if (ok) {
        status(`Deleted ${voice.name}.`);
        await this.refresh();
        $("voices-heading").focus();
      }
    });
    cell.replaceChildren(element("p", { className: "confirm", textContent: `Delete ${voice.name} for good?` }),
                         element("div", { className: "row" }, yes, no),
                         element("p", { id: errorId, className: "error", role: "alert", hidden: true }));
    no.focus();
  }
}
