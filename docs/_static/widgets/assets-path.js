// Served from this site, never a CDN: the widget manager (embed-amd.js, npm @jupyter-widgets/html-manager)
// resolves its icon fonts (Font Awesome, bundled) against its own module address. Name that address
// (the dist/ folder next to this file) so the fonts load from here whatever page is open.
(function () {
  var dist = new URL("dist/", document.currentScript.src).href;
  window.__jupyter_widgets_assets_path__ = dist;
  window.require.config({ paths: { "@jupyter-widgets/html-manager": dist + "embed-amd" } });
})();
