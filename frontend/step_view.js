// The step picture's section: its phase title, the stepper's pills and buttons, and the SVG drawn by the
// picture's drawer; while a phase animates, one redraw per animation frame.

import { clear, el, textWidth } from "./dom.js";
import { drawerFor } from "./drawers.js";
import { formatNumber, isNum } from "./format.js";
import { tr } from "./words.js";
import { drawStepPicture, phaseColour, phaseName } from "./picture.js";
import { currentPhase, phaseGroups, pickPhase, shownPicture } from "./stepper.js";
import { renderTimeline } from "./timeline.js";

export function renderPicture(state) {
  const pic = shownPicture(state);
  const groups = phaseGroups(pic);
  const phase = currentPhase(state, performance.now());
  const key = [pic ? `${pic.step}/${pic.time}` : "none", phase.index, state.width, state.stepper.playing,
               state.run ? state.run.status : "", state.lang].join("|");
  if (key === state.stepper.drawnKey && !state.dirty.picture) {
    if (phase.animating) scheduleFrame(state);
    return;
  }
  state.stepper.drawnKey = key;
  state.dirty.picture = false;
  const { dom } = state;
  const drawer = drawerFor(pic);
  dom.pictureEmpty.hidden = !!pic;
  dom.pictureSvg.style.display = pic ? "" : "none";
  // frozen while the run is paused and the teacher has not pressed play: a picture, not a movie
  const paused = state.run && state.run.status === "paused" && !state.stepper.playing;
  dom.picture.classList.toggle("fl-still", phase.done || paused);
  dom.play.textContent = state.stepper.playing ? tr("live.stepper.hold") : tr("live.stepper.play");
  dom.play.classList.toggle("fl-on", state.stepper.playing);
  dom.prev.disabled = dom.next.disabled = !groups.length;
  renderPills(state, pic, groups, phase, drawer);
  fitTitle(state, pic ? phaseTitle(pic, groups, phase, drawer) : tr("live.picture.title"));
  if (pic) drawStepPicture(dom.pictureSvg, pic, groups, phase, pictureWidth(state), drawer);
  if (state.dirty.timeline !== true && state.lastTimelinePhase !== phase.index) renderTimeline(state);
  if (phase.animating) scheduleFrame(state);
}

// The phase's caption on one line, so that the picture and the charts keep their place on the first screen:
// a caption longer than the line is set smaller (down to TITLE_MIN_PX), and wraps only below that.
const TITLE_MIN_PX = 16;

function fitTitle(state, text) {
  const title = state.dom.phaseTitle;
  const width = title.clientWidth;
  const key = `${text}/${width}/${state.dom.root.className}`;
  if (key === state.titleKey) return;
  state.titleKey = key;
  title.style.fontSize = "";
  title.textContent = text;
  const base = parseFloat(getComputedStyle(title).fontSize) || 22;
  const needed = textWidth(text, base, 700);
  if (width > 0 && needed > width) {
    title.style.fontSize = `${Math.max(TITLE_MIN_PX, Math.floor((base * width) / needed) - 0.5)}px`;
  }
}

function scheduleFrame(state) {
  if (state.raf || state.disposed) return;
  state.raf = requestAnimationFrame(() => {
    state.raf = null;
    renderPicture(state);
  });
}

// The section's inner width (its padding is 6 px a side): the SVG is drawn at exactly that size, or where
// CSS zooms it (the presenter's bigger picture, live.css) at that size over the zoom, so that it fills it.
function pictureWidth(state) {
  const inner = state.dom.picture.clientWidth - 12;
  const zoom = parseFloat(getComputedStyle(state.dom.pictureSvg).zoom) || 1;
  return (inner > 0 ? inner : state.width - 24) / zoom;
}

// The pills are made again only when the step's phases change (their names, or the language): while a slow
// run animates through its phases they are only marked, so that a click never lands on a pill that a
// redraw has just replaced (a pipeline's ten or more ticks redraw them many times a second).
// A pill named by torch's own function (scatter, allreduce) keeps that name, with its word in the page's
// language beside it where that differs (fitcore/core/locales/glossary.json: "scatter 分发"), as the title says it.
function gloss(name) {
  const key = `glossary.${name}`;
  const word = tr(key);
  return word !== key && word !== name ? word : "";
}

function renderPills(state, pic, groups, phase, drawer) {
  const { pills, stepInfo } = state.dom;
  const names = groups.map((group) => (drawer.groupName && drawer.groupName(group)) || phaseName(drawer, group.name));
  const glosses = groups.map((group, i) => (names[i] === group.name ? gloss(group.name) : ""));
  const key = `${state.lang}|${drawer.key}|${names.join("|")}|${glosses.join("|")}`;
  if (key !== state.pillKey) {
    state.pillKey = key;
    clear(pills);
    groups.forEach((group, i) => {
      const pill = el("span", "fl-pill", names[i]);
      if (glosses[i]) pill.append(el("span", "fl-gloss", glosses[i]));
      pill.style.setProperty("--phase", phaseColour(drawer, group.name));
      pill.addEventListener("click", () => {
        pickPhase(state, i);
        state.dirty.picture = true;
        state.redraw();
      });
      pills.append(pill);
    });
    // the presenter's pills keep one row while they fit it; a pipeline's thirty ticks do not, and wrap
    // rather than run past the picture's edge (measured once per set of pills: wrapped, they fit)
    pills.classList.remove("fl-pills-wrap");
    if (pills.scrollWidth > state.dom.picture.clientWidth) pills.classList.add("fl-pills-wrap");
  }
  [...pills.children].forEach((pill, i) => {
    pill.classList.toggle("fl-done", i < phase.index);
    pill.classList.toggle("fl-now", i === phase.index);
  });
  if (!pic) {
    stepInfo.textContent = "";
    return;
  }
  const where = { step: pic.step, epoch: pic.epoch, batch: pic.batch };
  const info = state.picture && state.picture.step !== pic.step
    ? tr("live.stepper.info_held", { ...where, latest: state.picture.step }) : tr("live.stepper.info", where);
  // the step shown is the last before the run's one divergence step, which the charts and status line name
  const diverged = state.run && isNum(state.run.diverged_at) ? state.run.diverged_at : null;
  stepInfo.textContent = diverged === null ? info
    : `${info} · ${tr("live.stepper.info_diverged", { step: diverged })}`;
  stepInfo.hidden = false;  // where the pills leave them too little room to be read whole, they go
  if (stepInfo.scrollWidth > stepInfo.clientWidth + 1) stepInfo.hidden = true;
}

// The big line: which phase, in words a student can read off the projector.
export function phaseTitle(pic, groups, phase, drawer) {
  if (phase.done) {
    const loss = isNum(pic.loss) ? tr("live.title.loss", { loss: formatNumber(pic.loss) }) : "";
    if (!groups.length) return tr("live.title.step", { step: pic.step, loss });  // a single device: no phases
    return tr("live.title.done", { step: pic.step, n: groups.length, loss });
  }
  const group = groups[phase.index];
  const describe = drawer.phaseText[group.name];
  return describe ? describe(pic, group) : phaseName(drawer, group.name);
}
