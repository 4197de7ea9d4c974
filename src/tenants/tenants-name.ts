/** The name of the gateway's one tenants object (virtual keys and their usage). */
export const TENANTS_NAME = "tenants";
