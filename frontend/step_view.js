// The step picture's section: its phase title, the stepper's pills and buttons, and the SVG drawn by the
// picture's drawer; while a phase animates, one redraw per animation frame.

import { clear, el } from "./dom.js";
import { drawerFor } from "./drawers.js";
import { formatNumber, isNum } from "./format.js";
import { drawStepPicture, phaseColour } from "./picture.js";
import { currentPhase, phaseGroups, pickPhase, shownPicture } from "./stepper.js";
import { renderTimeline } from "./timeline.js";

export function renderPicture(state) {
  const pic = shownPicture(state);
  const groups = phaseGroups(pic);
  const phase = currentPhase(state, performance.now());
  const key = [pic ? `${pic.step}/${pic.time}` : "none", phase.index, state.width, state.stepper.playing,
               state.run ? state.run.status : ""].join("|");
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
  dom.play.textContent = state.stepper.playing ? "❚❚ hold" : "▷ play";
  dom.play.classList.toggle("fl-on", state.stepper.playing);
  dom.prev.disabled = dom.next.disabled = !groups.length;
  renderPills(state, pic, groups, phase, drawer);
  dom.phaseTitle.textContent = pic ? phaseTitle(pic, groups, phase, drawer) : "The step picture";
  if (pic) drawStepPicture(dom.pictureSvg, pic, groups, phase, pictureWidth(state), drawer);
  if (state.dirty.timeline !== true && state.lastTimelinePhase !== phase.index) renderTimeline(state);
  if (phase.animating) scheduleFrame(state);
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

function renderPills(state, pic, groups, phase, drawer) {
  const { pills, stepInfo } = state.dom;
  clear(pills);
  groups.forEach((group, i) => {
    const pill = el("span", "fl-pill", group.name);
    pill.style.setProperty("--phase", phaseColour(drawer, group.name));
    if (i < phase.index) pill.classList.add("fl-done");
    if (i === phase.index) pill.classList.add("fl-now");
    pill.addEventListener("click", () => {
      pickPhase(state, i);
      state.dirty.picture = true;
      state.redraw();
    });
    pills.append(pill);
  });
  if (!pic) {
    stepInfo.textContent = "";
    return;
  }
  const latest = state.picture && state.picture.step !== pic.step ? ` (latest ${state.picture.step})` : "";
  stepInfo.textContent = `step ${pic.step}${latest} · epoch ${pic.epoch}, batch ${pic.batch}`;
}

// The big line: which phase, in words a student can read off the projector.
export function phaseTitle(pic, groups, phase, drawer) {
  if (phase.done) {
    const loss = isNum(pic.loss) ? ` · loss ${formatNumber(pic.loss)}` : "";
    if (!groups.length) return `Step ${pic.step}${loss}`;  // a single device records no phases
    return `Step ${pic.step}: all ${groups.length} phases done${loss}`;
  }
  const group = groups[phase.index];
  const describe = drawer.phaseText[group.name];
  return describe ? describe(pic, group) : group.name;
}
