// The voice lab's calls to its server (docs/HTTP.md). Every URL is relative to the page, because
// Home Assistant's ingress serves the page under a path prefix (/api/hassio_ingress/<token>/).

const TOKEN_KEY = "voiceLabToken";

/** An API answer that was not a success: its HTTP status and the server's `error` message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** Relative to the page's own URL (document.baseURI), which under ingress carries the prefix. */
export function apiUrl(path) {
  return new URL(path, document.baseURI).toString();
}

/** A page opened once as `?token=TOKEN` keeps the token and drops it from the address bar and the
 * history, where it would be on show. */
function keepTokenFromUrl() {
  const url = new URL(window.location.href);
  const given = url.searchParams.get("token");
  if (!given) return;
  window.localStorage.setItem(TOKEN_KEY, given);
  url.searchParams.delete("token");
  window.history.replaceState(null, "", url);
}
keepTokenFromUrl();

let askToken = null;

/** Who asks the user for a token when the server answers 401 (standalone servers may require one):
 * an async function returning the token, or null when the user gives up. */
export function onTokenNeeded(ask) {
  askToken = ask;
}

function headers(extra) {
  const out = new Headers(extra || {});
  const token = window.localStorage.getItem(TOKEN_KEY);
  if (token) out.set("Authorization", `Bearer ${token}`);
  return out;
}

async function errorOf(response) {
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    if (body && typeof body.error === "string" && body.error) message = body.error;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, message);
}

/** fetch() with the stored token; on 401 asks for a token once and tries again. Resolves to the
 * Response when it is a success, rejects with an ApiError otherwise. */
export async function request(path, init = {}) {
  for (let attempt = 0; ; attempt++) {
    let response;
    try {
      response = await fetch(apiUrl(path), { ...init, headers: headers(init.headers) });
    } catch (err) {
      if (err.name === "AbortError") throw err;
      throw new ApiError(0, "The server cannot be reached. Is the add-on running?");
    }
    if (response.status === 401 && attempt === 0 && askToken) {
      const token = await askToken();
      if (token) {
        window.localStorage.setItem(TOKEN_KEY, token);
        continue;
      }
    }
    if (!response.ok) throw await errorOf(response);
    return response;
  }
}

export async function getJson(path) {
  return (await request(path)).json();
}

export async function sendJson(method, path, body) {
  return request(path, { method, headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

/** A multipart/form-data body from plain fields and at most one file (`audio`). */
export function formOf(fields, audio) {
  const form = new FormData();
  for (const [key, value] of Object.entries(fields)) form.append(key, value ?? "");
  if (audio) form.append("audio", audio.blob, audio.filename);
  return form;
}
