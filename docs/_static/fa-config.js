// The theme's Font Awesome script replaces every <i class="fa ..."> with an <svg>. The widgets' Play button
// keeps a handle on its <i> and changes its class when playing ("Cannot set properties of undefined" and a
// Play that never plays once the <i> is gone). Keep the <i> elements: the theme's CSS web font draws every
// icon, the theme's and the widgets' alike.
window.FontAwesomeConfig = { autoReplaceSvg: false, observeMutations: false };
