// A notebook page whose steppers did not render (a browser that would not run the widget manager for a page opened
// from disk, or a copy of the site without _static/widgets): one line at the top of the page that says how to open
// the site so that they do, through a web server on this machine.
(function () {
  const here = document.currentScript && document.currentScript.src;
  window.addEventListener("load", () => {
    if (!document.querySelector('script[type="application/vnd.jupyter.widget-view+json"]')) return;  // no widgets
    setTimeout(() => {
      if (document.querySelector(".jupyter-widgets")) return;                       // they rendered
      const root = new URL("../", here);                                            // _static/ -> the site's folder
      const page = decodeURIComponent(location.pathname).slice(decodeURIComponent(root.pathname).length)
        || "index.html";                                       // both decoded: a folder named "my work" is 7, not 9
      const dir = root.protocol === "file:" ? decodeURIComponent(root.pathname).replace(/\/$/, "") : ".";
      const hint = document.createElement("p");
      hint.className = "xp-open-hint";
      hint.innerHTML = "The steppers on this page did not load in this browser. Open the site through a server " +
        "on this machine instead: <code></code>, then <code></code>";
      const [cmd, url] = hint.querySelectorAll("code");
      cmd.textContent = `python3 -m http.server --bind 127.0.0.1 --directory '${dir.replace(/'/g, "'\\''")}' 8000`;
      url.textContent = `http://127.0.0.1:8000/${page}`;
      const main = document.querySelector("article.bd-article") || document.body;
      main.prepend(hint);
    }, 3000);
  });
})();
