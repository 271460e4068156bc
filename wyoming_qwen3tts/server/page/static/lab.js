// The voice lab page: waits for the server, reads what it can do, then wires the parts together.

import { getJson, onTokenNeeded } from "./api.js";
import { VoiceMaker } from "./make.js";
import { $, showError, status } from "./ui.js";
import { VoiceList } from "./voices.js";
import { StreamPlayer } from "./wavstream.js";

const RETRY_MS = 2000;

/** Asks for the server's token in a modal dialog; resolves with it, or null when cancelled. */
function askToken() {
  const dialog = $("token-dialog");
  $("token").value = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok" ? $("token").value.trim() : null),
                            { once: true });
    dialog.showModal();
  });
}

async function waitUntilReady() {
  for (;;) {
    try {
      if ((await getJson("api/health")).ready) return;
      status("The voice model is loading…");
    } catch (err) {
      status(err.status === 503 ? "The voice model is loading…" : `Waiting for the server: ${err.message}`);
    }
    await new Promise((r) => setTimeout(r, RETRY_MS));
  }
}

async function main() {
  onTokenNeeded(askToken);
  await waitUntilReady();
  const info = await getJson("api/info");
  const player = new StreamPlayer((playing) => { $("stop-playback").disabled = !playing; });
  $("stop-playback").addEventListener("click", () => {
    player.stop();
    status("Stopped.");
  });
  const sample = () => $("sample").value.trim() || $("sample").defaultValue;
  const voices = new VoiceList(player, sample, info.languages || []);
  new VoiceMaker(info, player, voices).setup();
  await voices.refresh();
  status(`Ready (version ${info.version}).`);
  document.body.dataset.ready = "true";
}

main().catch((err) => showError("page-error", `The voice lab could not start: ${err.message}`));
