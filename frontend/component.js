// The st.components.v2 component's own script (app.py passes this file's text as `js`). Streamlit runs it
// from a blob: address, where no relative import resolves, so it imports the live view's modules from the
// app's own route (fitcore/api.py serves frontend/ at data.assets) and hands the component to mount.js.
export default async function fitcoreLiveLoader(component) {
  const base = new URL(`${component.data.assets}/`, window.location.href);
  const { default: mount } = await import(new URL("mount.js", base).href);
  return mount(component);
}
