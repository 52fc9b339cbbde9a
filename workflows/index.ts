/** Every workflow the control worker runs (this is its workflowsPath). */
export { replica } from './replica';
export { modelDeployment } from './model';
export { drainNode } from './drain';
export { renewCertificate, publishCrl } from './ca';
export { ensureEngines } from './engines';
export { onboardNode } from './onboard';
export { provisionNode } from './provision';
export { addNode } from './add-node';
export { removeNode } from './remove-node';
