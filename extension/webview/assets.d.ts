// esbuild bundles the panel's stylesheet into dist/webview.css.
declare module '*.css';
