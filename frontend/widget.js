// fitcore.notebook.Live's view in a notebook (an anywidget; fitcore/notebook/widget.py is its kernel side):
// the page's live view, unchanged, under the run's buttons. The kernel pushes the payloads the page would
// poll for (mount.js pushPayload), so the view makes no request of its own: Jupyter serves no route of ours.
//
// Messages, both ways as the widget's custom messages (never synced state, so a saved notebook does not keep
// a run's history, nor plotly.js):
//   view -> kernel  {type: "hello"}: this view is new, send the whole run (or the planned step);
//                   {type: "control", action}: a button; {type: "plotly"}: plotly.js, once per page;
//   kernel -> view  {type: "payload", payload, replace}: fitcore/kit/live.py's payload, whole or the steps after
//                   the last one sent; {type: "plotly"} with the file as its one buffer.
// Synced state: lang and texts (the view's words), labels (the buttons' words, the page's own), error (one
// line, shown in the widget: a bad argument, a failed push) and note (what this host cannot do).

import { el } from "./dom.js";
import mountLive, { pushPayload } from "./mount.js";

const ACTIONS = ["start", "pause", "resume", "step", "stop", "reset"];
// The buttons a run's status offers, as the page's own run buttons do: a paused run steps one at a time.
const OFFERED = {
  ready: ["start"],
  queued: ["stop"],
  running: ["pause", "stop"],
  paused: ["resume", "step", "stop"],
};
const ENDED_OFFERS = ["start", "reset"];  // finished, stopped, diverged or failed

// plotly.js (4.8 MB) comes once per page, from whichever widget asks first, as a blob the charts load.
function plotlyUrl(model) {
  if (!window.fitcorePlotlyUrl) {
    window.fitcorePlotlyUrl = new Promise((resolve) => {
      const onMessage = (message, buffers) => {
        if (!message || message.type !== "plotly" || !buffers || !buffers.length) return;
        model.off("msg:custom", onMessage);
        resolve(URL.createObjectURL(new Blob(buffers, { type: "text/javascript" })));
      };
      model.on("msg:custom", onMessage);
      model.send({ type: "plotly" });
    });
  }
  return window.fitcorePlotlyUrl;
}

function mountData(model) {
  return { push: true, payload: null, plotly: () => plotlyUrl(model), lang: model.get("lang"),
           texts: model.get("texts") };
}

function render({ model, el: host }) {
  const root = el("div", "fl-nb");
  const bar = el("div", "fl-nb-bar");
  const buttons = {};
  for (const action of ACTIONS) {
    const button = el("button", `fl-btn fl-nb-${action}`);
    button.type = "button";
    // Pause acts on the press, not the release, as the page's does (mount.js pauseAtOnce): at 20 steps a
    // second a click's 100 ms is two steps more. A key's click, which has no press, still pauses.
    let pressed = false;
    button.addEventListener("pointerdown", () => {
      if (action !== "pause") return;
      pressed = true;
      model.send({ type: "control", action });
    });
    button.addEventListener("click", () => {
      if (!pressed) model.send({ type: "control", action });
      pressed = false;
    });
    buttons[action] = button;
    bar.append(button);
  }
  const note = el("div", "fl-nb-note");
  const error = el("div", "fl-nb-error");
  error.setAttribute("role", "alert");
  const view = el("div", "fl-nb-view");
  root.append(bar, note, error, view);
  host.append(root);
  const cleanup = mountLive({ data: mountData(model), parentElement: view, setTriggerValue: null });

  const update = () => {
    const labels = model.get("labels") || {};
    const state = view.fitcoreLiveState;
    const status = state && state.run ? state.run.status : "ready";
    const offered = OFFERED[status] || ENDED_OFFERS;
    const broken = !!model.get("error");
    for (const action of ACTIONS) {
      buttons[action].textContent = labels[action] || action;
      buttons[action].hidden = !offered.includes(action);
      buttons[action].disabled = broken && action === "start";  // nothing to start: the error says why
    }
    root.dataset.status = status;
    error.textContent = model.get("error") || "";
    error.hidden = !error.textContent;
    view.hidden = broken && !(state && state.run);  // a config that cannot run has no step to draw
    note.textContent = model.get("note") || "";
    note.hidden = !note.textContent;
  };
  const onMessage = (message) => {
    if (!message || message.type !== "payload") return;
    pushPayload(view, message.payload, message.replace === true);
    update();
    // what this page received, for benchmarks/notebook_push.py (as poll.js keeps window.fitcoreLive)
    const metrics = window.fitcoreNotebook || { messages: 0 };
    metrics.messages += 1;
    window.fitcoreNotebook = metrics;
  };
  const onWords = () => {  // another language: the view takes its words again, then the run in them
    mountLive({ data: mountData(model), parentElement: view, setTriggerValue: null });
    model.send({ type: "hello" });
  };
  const listeners = [
    ["msg:custom", onMessage], ["change:error", update], ["change:note", update], ["change:labels", update],
    ["change:texts", onWords],
  ];
  for (const [event, listener] of listeners) model.on(event, listener);
  update();
  model.send({ type: "hello" });
  return () => {
    for (const [event, listener] of listeners) model.off(event, listener);
    cleanup();
    root.remove();
  };
}

export default { render };
