/** An OpenAI model object, as GET /v1/models lists it and GET /v1/models/{id} answers it. */
export interface ModelObject {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
  /** The model group the name routes to: its own name, or the group an alias stands for. */
  root: string;
}

/** The object of a name the gateway serves: a group's name or one of its aliases. */
export function modelObject(id: string, group: string): ModelObject {
  return { id, object: "model", created: 0, owned_by: "kvgate", root: group };
}
