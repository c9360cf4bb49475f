// The st.components.v2 component's own script (app.py passes this file's text as `js`). Streamlit runs it
// from a blob: address, where no relative import resolves, so it imports the live view's modules from the
// app's own route (fitcore/api.py serves frontend/ at data.assets) and hands the component to mount.js.
//
// The import takes a moment on a fresh page, and a Start pressed meanwhile calls this again with the run's
// data before the first call has mounted: the calls' imports may settle in either order, and Streamlit
// calls a superseded call's cleanup once it settles. So only the latest call of a mount point mounts, and
// a superseded one returns a cleanup that leaves the live view alone (it would dispose the shared state).
export default async function fitcoreLiveLoader(component) {
  const spot = component.parentElement;
  spot.fitcoreLatestCall = component;
  const base = new URL(`${component.data.assets}/`, window.location.href);
  const { default: mount } = await import(new URL("mount.js", base).href);
  if (spot.fitcoreLatestCall !== component) return () => {};  // superseded: the newer call mounts its data
  return mount(component);
}
