// Small helpers the page's parts share: the status line and the error next to each control.

export const $ = (id) => document.getElementById(id);

/** Says `message` in the page's live status region (screen readers announce it). */
export function status(message) {
  $("status").textContent = message;
}

/** Shows an error next to the control that caused it (an element with role=alert). */
export function showError(id, message) {
  const el = $(id);
  el.textContent = message;
  el.hidden = false;
}

export function clearError(id) {
  const el = $(id);
  el.textContent = "";
  el.hidden = true;
}

/** Runs `work` with `button` disabled and its error cleared. An error lands in `errorId`, or in
 * `audioErrorId` when the server refused the audio itself (413 too large, 415 not decodable): that
 * message belongs next to the Record and Upload controls. */
export async function busy(button, errorId, work, audioErrorId = null) {
  clearError(errorId);
  button.disabled = true;
  try {
    return await work();
  } catch (err) {
    const audio = audioErrorId && (err.status === 413 || err.status === 415);
    showError(audio ? audioErrorId : errorId, err.message || String(err));
    return undefined;
  } finally {
    button.disabled = false;
  }
}

/** An element with `props` set as properties where the element has them, else as attributes. */
export function element(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key in el) el[key] = value;
    else el.setAttribute(key, value);
  }
  for (const child of children) el.append(child);
  return el;
}

let serial = 0;

/** A new element id (crypto.randomUUID exists only in secure contexts, and the page runs in both). */
export function uniqueId(prefix) {
  serial += 1;
  return `${prefix}-${serial}`;
}

let names = null;

/** "English (en)" for a language code the browser knows, else the server's word as it is
 * ("auto", or a name such as "english"). */
export function languageName(code) {
  try {
    names = names || new Intl.DisplayNames([navigator.language, "en"], { type: "language" });
    const name = names.of(code);
    return name && name.toLowerCase() !== code.toLowerCase() ? `${name} (${code})` : code;
  } catch {
    return code; // not a language code, or no Intl.DisplayNames
  }
}
