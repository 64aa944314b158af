// Every command, view, setting and state id the extension uses, in one place.

export const EXTENSION_ID = 'hookscope.hookscope';
export const DEBUG_TYPE = 'hookscope';
/** Debug types whose launches Hookscope joins. */
export const PYTHON_DEBUG_TYPES = ['debugpy', 'python', DEBUG_TYPE] as const;

export const Commands = {
  toggleLayerBreakpoint: 'hookscope.toggleLayerBreakpoint',
  toggleForwardBreakpoint: 'hookscope.toggleForwardBreakpoint',
  toggleBackwardBreakpoint: 'hookscope.toggleBackwardBreakpoint',
  watchLayer: 'hookscope.watchLayer',
  toggleBreakOnNonFinite: 'hookscope.toggleBreakOnNonFinite',
  breakOnNonFiniteOn: 'hookscope.breakOnNonFiniteOn',
  breakOnNonFiniteOff: 'hookscope.breakOnNonFiniteOff',
  gradientHealthMenu: 'hookscope.gradientHealthMenu',
  editLayerBreakpointCondition: 'hookscope.editLayerBreakpointCondition',
  addLayerBreakpointByName: 'hookscope.addLayerBreakpointByName',
  removeLayerBreakpoint: 'hookscope.removeLayerBreakpoint',
  chooseBreakpointInstance: 'hookscope.chooseBreakpointInstance',
  removeAllLayerBreakpoints: 'hookscope.removeAllLayerBreakpoints',
  revealBreakpoint: 'hookscope.revealBreakpoint',
  showTensors: 'hookscope.showTensors',
  openTensorsInEditor: 'hookscope.openTensorsInEditor',
  revealLayer: 'hookscope.revealLayer',
  removeAllHooks: 'hookscope.removeAllHooks',
  listHooks: 'hookscope.listHooks',
  addIntervention: 'hookscope.addIntervention',
  removeAllInterventions: 'hookscope.removeAllInterventions',
  selectInterpreter: 'hookscope.selectInterpreter',
  showLog: 'hookscope.showLog',
  showInHookscope: 'hookscope.showInHookscope',
  showExpressionInHookscope: 'hookscope.showExpressionInHookscope',
  restartLanguageServer: 'hookscope.restartLanguageServer',
} as const;

export const Views = {
  layers: 'hookscope.layers',
  layerBreakpoints: 'hookscope.layerBreakpoints',
  tensors: 'hookscope.tensors',
} as const;

export const Settings = {
  section: 'hookscope',
  pythonPath: 'pythonPath',
  backend: 'backend',
  summaryRateHz: 'summaryRateHz',
  breakOnNonFinite: 'breakOnNonFinite',
  breakOnExplodingGradients: 'breakOnExplodingGradients',
  breakOnVanishingGradients: 'breakOnVanishingGradients',
  runCompiledEagerly: 'runCompiledEagerly',
  traceFile: 'traceFile',
  diagnostics: 'diagnostics',
  tensorPresentation: 'tensorPresentation',
  openTensorsBesideAtStop: 'openTensorsBesideAtStop',
} as const;

export const ContextKeys = {
  breakOnNonFinite: 'hookscope.breakOnNonFinite',
  connected: 'hookscope.connected',
  paused: 'hookscope.paused',
} as const;

export const StateKeys = {
  layerBreakpoints: 'hookscope.layerBreakpoints.v1',
} as const;
