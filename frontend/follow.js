// A room: the students' pages follow the teacher's run, and the teacher's page says where its picture is.
//
// A student's page (data.follow = the room's code) polls GET <endpoint>?room=<code>&run=<shown>&since=<last>
// for as long as it is open: the teacher's run, read-only, whatever run it is now (a new one replaces the
// shown one), and the room's part (fitcore/follow.py): the teacher's phase of the step, and the question the
// teacher's paused step asks, with this page's own answer and, once revealed, the right one. The page
// answers with POST <answer>?room=&q=&choice=. The teacher's page (data.teach = the code) posts which phase
// its picture shows, so that the students' pictures show it too.

import { el } from "./dom.js";
import { tr } from "./words.js";
import { currentPhase, shownPicture } from "./stepper.js";

export const FOLLOW_IDLE_MS = 500;  // a student's poll while the teacher's run stands still: a reveal in 1 s
const ANSWER_PATH = "/fitcore/room/answer";
const WALK_PATH = "/fitcore/room/walk";
const REVEAL_PATH = "/fitcore/room/reveal";

export function followUrl(state, since) {
  const run = state.run && /^run-[0-9]{1,12}$/.test(state.run.id) ? `&run=${state.run.id}` : "";
  return `${state.endpoint}?room=${encodeURIComponent(state.follow)}${run}&since=${since}`
    + `&lang=${encodeURIComponent(state.lang || "en")}`;
}

// The room's part of an answer: the teacher's phase (held where the teacher holds it), the question.
export function applyFollow(state, part) {
  state.room = part || { walk: null, question: null };
  const walk = state.room.walk;
  const pic = state.picture;
  if (walk && pic && walk.step === pic.step && state.run && state.run.status !== "running") {
    const stepper = state.stepper;
    if (stepper.playing || stepper.phase !== walk.phase) state.dirty.picture = true;
    stepper.playing = false;
    stepper.held = pic;
    stepper.phase = walk.phase;
  }
}

// The veil's contents on a student's page: the question, its choices (until this page answered), then
// "waiting for the reveal". Built again only when the question or the page's answer changes.
export function renderQuestion(state) {
  const question = state.room && state.room.question;
  const key = question ? `${question.key}/${question.mine}/${question.revealed}/${state.lang}` : "";
  if (key === state.questionShown) return;
  state.questionShown = key;
  const veil = state.dom.veil;
  veil.replaceChildren();
  if (!question) return;
  const box = el("div", "fl-question");
  box.append(el("div", "fl-question-title", tr("live.follow.question")), el("div", "fl-question-text", question.text));
  const choices = el("div", "fl-choices");
  question.choices.forEach((text, i) => {
    const button = el("button", "fl-choice", text);
    button.disabled = question.mine !== null && question.mine !== undefined;
    if (question.mine === i) button.classList.add("fl-chosen");
    button.addEventListener("click", () => answer(state, question, i));
    choices.append(button);
  });
  box.append(choices);
  if (question.mine !== null && question.mine !== undefined) {
    box.append(el("div", "fl-question-wait", tr("live.follow.waiting_reveal")));
  }
  veil.append(box);
}

async function answer(state, question, choice) {
  question.mine = choice;  // at once on this page; the next poll brings the room's own record of it
  state.questionShown = null;
  renderQuestion(state);
  const query = `room=${encodeURIComponent(state.follow)}&q=${encodeURIComponent(question.key)}&choice=${choice}`;
  try {
    await fetch(`${ANSWER_PATH}?${query}`, { method: "POST", credentials: "same-origin", cache: "no-store" });
  } catch (error) {
    // the next poll says what the room holds; an answer that did not arrive can be given again then
  }
}

// After the reveal, whether this page's answer was right: "right", "wrong", "none" (it did not answer), or ""
// before the reveal. The box under the picture differs by it in its mark, its words and its border, not by
// colour alone (live.css: .fl-answer-right, -wrong, -none).
export function revealKind(question) {
  if (!question || !question.revealed) return "";
  if (question.mine === null || question.mine === undefined) return "none";
  return question.mine === question.answer ? "right" : "wrong";
}

// After the reveal, under the picture: the right answer, and whether this page's was.
export function revealText(question) {
  if (!question || !question.revealed) return "";
  const right = question.choices[question.answer];
  if (question.mine === question.answer) return tr("live.follow.right", { why: question.why });
  if (question.mine === null || question.mine === undefined) {
    return tr("live.follow.answer", { answer: right, why: question.why });
  }
  return tr("live.follow.wrong", { answer: right, why: question.why });
}

// The teacher's page: where its picture stands (a still run's step and phase), posted when it moves.
export function postWalk(state, now) {
  if (!state.teach || !state.run || state.run.status === "running") return;
  const pic = shownPicture(state);
  if (!pic) return;
  const index = currentPhase(state, now).index;
  const key = `${state.run.id}/${pic.step}/${index}`;
  if (key === state.walkPosted) return;
  state.walkPosted = key;
  const query = `room=${encodeURIComponent(state.teach)}&run=${encodeURIComponent(state.run.id)}`
    + `&step=${pic.step}&phase=${Math.min(99, index)}`;
  fetch(`${WALK_PATH}?${query}`, { method: "POST", credentials: "same-origin", cache: "no-store" })
    .catch(() => { state.walkPosted = null; });
}

// The teacher's page: its own run's polls also bring the room's counts (`&teach=<code>`).
export function teachQuery(state) {
  return state.teach ? `&teach=${encodeURIComponent(state.teach)}` : "";
}

// The teacher's veil, on the projector: the question, each choice with its count as it comes in, how many
// answered and follow, and Reveal, which unveils every page of the room at once.
export function renderTeacherQuestion(state) {
  const question = state.question;
  const part = state.teachRoom && question && state.teachRoom.question === question.key ? state.teachRoom : null;
  const counts = part ? part.counts : question ? question.choices.map(() => 0) : [];
  const key = question ? `${question.key}/${counts.join(",")}/${part ? part.following : ""}/${state.lang}` : "";
  if (key === state.questionShown) return;
  state.questionShown = key;
  const veil = state.dom.veil;
  veil.replaceChildren();
  if (!question) return;
  const box = el("div", "fl-question");
  box.append(el("div", "fl-question-title", tr("live.teach.title")), el("div", "fl-question-text", question.text));
  box.append(countRows("fl-counts", question.choices, counts, null));
  const answered = part ? part.answered : 0;
  box.append(el("div", "fl-question-wait",
    tr("live.teach.answered", { n: answered, following: part ? part.following : 0 })));
  const reveal = el("button", "fl-reveal", tr("live.teach.reveal"));
  reveal.addEventListener("click", () => revealQuestion(state, question));
  box.append(reveal);
  veil.append(box);
}

// The teacher's page after the reveal, under the picture (on the projector's first screen): the right answer
// and why, and the class's count for every choice, the right one marked. Hidden before the reveal.
export function renderTally(box, tally) {
  const key = tally ? JSON.stringify([tally.key, tally.counts, tally.why]) : "";
  if (box.dataset.tally === key) return;
  box.dataset.tally = key;
  if (!tally) {
    if (box.classList.contains("fl-answer-tally")) { box.replaceChildren(); box.hidden = true; }
    return;
  }
  box.className = "fl-answer fl-answer-tally";
  const right = tally.choices[tally.answer];
  box.replaceChildren(
    el("div", "", tr("live.teach.revealed", { answer: right, why: tally.why, n: tally.answered })),
    countRows("fl-counts fl-counts-small", tally.choices, tally.counts, tally.answer));
  box.hidden = false;
}

// A bar a choice, as long as its count against the largest: the veil's counts, and the tally after the
// reveal with the right choice (index `right`, or null) marked ✓.
function countRows(className, choices, counts, right) {
  const most = Math.max(1, ...counts);
  const list = el("div", className);
  choices.forEach((text, i) => {
    const row = el("div", i === right ? "fl-count fl-count-right" : "fl-count");
    const bar = el("span", "fl-count-bar");
    bar.style.width = `${Math.round((100 * counts[i]) / most)}%`;
    const track = el("span", "fl-count-track");
    track.append(bar);
    row.append(el("span", "fl-count-n", String(counts[i])), track,
      el("span", "fl-count-text", i === right ? `✓ ${text}` : text));
    list.append(row);
  });
  return list;
}

async function revealQuestion(state, question) {
  const query = `room=${encodeURIComponent(state.teach)}&q=${encodeURIComponent(question.key)}`;
  try {
    const response = await fetch(`${REVEAL_PATH}?${query}`,
      { method: "POST", credentials: "same-origin", cache: "no-store" });
    if (!response.ok) return;
  } catch (error) {
    return;
  }
  state.reveal = true;  // this page unveils at once; the rerun brings the answer and the tally to show
  state.redraw();
  if (state.setTriggerValue) state.setTriggerValue("status", "revealed");
}
