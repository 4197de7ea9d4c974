/** The one tenants object of a gateway: virtual keys and their usage. */
export const TENANTS_NAME = "tenants";
