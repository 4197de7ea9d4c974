/** The name of the gateway's one fleet registry object. */
export const REGISTRY_NAME = "fleet";
